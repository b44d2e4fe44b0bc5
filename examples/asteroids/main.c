/* main.c: the asteroid game's host: world, C systems, Lua rules and mods, the frame loop.
 * Invariant: for a given seed all it prints is deterministic except wall-clock timings. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "components.h"
#include "kiln_lua.h"
#include "kiln_persist.h"
#include "systems.h"

#define MAX_MODS 16
#define DEFAULT_RULES "examples/asteroids/rules.lua"
#define DEFAULT_MAX_SHIPS 1000 /* ships alive at most: waves launch no more past it */

typedef struct options {
    int64_t frames;     /* 0: until --seconds or Ctrl-C */
    double seconds;     /* wall-clock limit; 0: none */
    uint64_t seed;
    int32_t asteroids, moons, workers;
    const char *rules;
    const char *mods[MAX_MODS];
    int mod_count;
    const char *mods_dir; /* --mods DIR */
    int console_port;   /* -1: no console */
    int64_t budget;     /* instructions per Lua system run; 0: none */
    int32_t max_ships;  /* the population cap the rules keep to (game.max_ships) */
    bool realtime;
    bool check_determinism; /* run serially and on workers side by side, comparing hashes */
} options;

typedef struct game {
    options opt;
    kiln_world *world;
    game_ids ids;
    game_systems *systems;
    kiln_query *count_asteroids, *count_moons, *count_ships;
    lua_State *L;
    int64_t load_used;  /* instructions charged to the file being loaded */
    int world_ref;            /* the kiln.World in the registry, whatever scripts do to globals */
    int mods_ref;             /* the mod manager (kiln.Mods) in the registry */
    int failures_ref;         /* the failures log consoles show (also the global `failures`) */
    kiln_schedule *schedule;
    int32_t c_systems;        /* systems [0, c_systems) are C; the rest were added from Lua */
    kiln_console *console;
    int64_t dropped_seen;     /* collide's dropped passes already reported */
    char poll_error[300];     /* the last failure of mods:poll reported, "" after one that worked */
} game;

static volatile sig_atomic_t interrupted = 0;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the console reports (bad tokens, HTTP input, dropped clients) goes to stderr. */
static void console_log(void *user, const char *message) {
    (void)user;
    fprintf(stderr, "%s\n", message);
}

/* Prints "asteroids: <message>" to stderr and exits 1. */
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("asteroids: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Writes printf-formatted text that holds what a mod made (its prints, names, errors) with
 * control characters shown as escapes (ESC as \27; C1 controls, UTF-8 C2 80 to C2 9F, as
 * \u{80}): a mod must not retitle the player's terminal, move its cursor or write its
 * clipboard. Newlines and tabs pass, and so does other UTF-8 text. */
static void say(FILE *out, const char *fmt, ...) {
    char small[512], *text = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof small && (text = malloc((size_t)n + 1))) {
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (!text) text = small; /* out of memory: the first 511 bytes */
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (c[0] == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F) fprintf(out, "\\u{%X}", *++c);
        else if ((*c < 0x20 && *c != '\n' && *c != '\t') || *c == 0x7F) fprintf(out, "\\%d", *c);
        else fputc(*c, out);
    }
    if (text != small) free(text);
}

/* ---- arguments -------------------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out,
            "usage: asteroids [options]\n"
            "  --frames N      run N frames of 1/%d s (default 600; 0: until --seconds or Ctrl-C)\n"
            "  --seconds S     stop after S seconds of wall-clock time\n"
            "  --seed N        seed of the field and the waves, below 2^53 (default 1)\n"
            "  --asteroids N   asteroids in the field (default 100000)\n"
            "  --moons N       moons orbiting the first large asteroids (default 300)\n"
            "  --workers N     worker threads for C systems (default 1; 0: all inline)\n"
            "  --rules FILE    the Lua rules (default " DEFAULT_RULES ")\n"
            "  --mod PATH      load a mod (a NAME.lua file or a folder with manifest.lua)\n"
            "                  after the rules, in a sandbox of its own (repeatable)\n"
            "  --mods DIR      load every mod in DIR, in the order their depends ask\n"
            "  --max-ships N   ships alive at most; waves launch no more past it\n"
            "                  (default %d)\n"
            "  --instructions N  instructions one Lua system run (or a mod's top level)\n"
            "                  may take before it fails (--budget N: the same)\n"
            "                  (default 50000000; 0: no budget)\n"
            "  --console PORT  accept `kiln --connect 127.0.0.1:PORT` (0: any free port);\n"
            "                  implies --realtime\n"
            "  --realtime      pace frames to %d per second instead of running flat out\n"
            "  --check-determinism  run the same seed serially and on --workers workers (at\n"
            "                  least 1) side by side, comparing the world hash every frame\n",
            FRAME_RATE, DEFAULT_MAX_SHIPS, FRAME_RATE);
}

/* The integer value of option argv[i + 1] in [lo, hi]; exits with a message otherwise. */
static int64_t int_arg(int argc, char **argv, int i, int64_t lo, int64_t hi) {
    char *end = NULL;
    errno = 0;
    long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
    if (i + 1 >= argc || errno || end == argv[i + 1] || *end || v < lo || v > hi) {
        fprintf(stderr, "asteroids: %s needs an integer from %lld to %lld\n", argv[i],
                (long long)lo, (long long)hi);
        exit(2);
    }
    return v;
}

static const char *str_arg(int argc, char **argv, int i) {
    if (i + 1 >= argc) {
        fprintf(stderr, "asteroids: %s needs a value\n", argv[i]);
        exit(2);
    }
    return argv[i + 1];
}

static bool readable(const char *path) {
    FILE *f = fopen(path, "re");
    if (f) fclose(f);
    return f != NULL;
}

/* The rules next to the sources: in the working directory, or two levels above the binary
 * (build/examples/asteroids -> examples/asteroids/rules.lua). */
static const char *find_rules(const char *argv0, char *buf, size_t size) {
    if (readable(DEFAULT_RULES)) return DEFAULT_RULES;
    const char *slash = strrchr(argv0, '/');
    if (slash) {
        snprintf(buf, size, "%.*s/../../" DEFAULT_RULES, (int)(slash - argv0), argv0);
        if (readable(buf)) return buf;
    }
    return DEFAULT_RULES;
}

static options parse_options(int argc, char **argv, char *rules_buf, size_t rules_size) {
    options o = {.frames = 600, .seed = 1, .asteroids = 100000, .moons = 300, .workers = 1,
                 .console_port = -1, .budget = 50000000, .max_ships = DEFAULT_MAX_SHIPS};
    bool frames_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--frames") == 0) {
            o.frames = int_arg(argc, argv, i++, 0, INT64_MAX);
            frames_given = true;
        } else if (strcmp(a, "--seconds") == 0) {
            o.seconds = (double)int_arg(argc, argv, i++, 1, 86400);
        } else if (strcmp(a, "--seed") == 0) {
            /* below 2^53: LuaJIT holds game.seed as a double, and the rules' generator
             * splits it exactly only below 2^53 (above, the two VMs' waves differed) */
            o.seed = (uint64_t)int_arg(argc, argv, i++, 0, ((int64_t)1 << 53) - 1);
        } else if (strcmp(a, "--asteroids") == 0) {
            o.asteroids = (int32_t)int_arg(argc, argv, i++, 0, 10000000);
        } else if (strcmp(a, "--moons") == 0) {
            o.moons = (int32_t)int_arg(argc, argv, i++, 0, 1000000);
        } else if (strcmp(a, "--workers") == 0) {
            o.workers = (int32_t)int_arg(argc, argv, i++, 0, 64);
        } else if (strcmp(a, "--max-ships") == 0) {
            o.max_ships = (int32_t)int_arg(argc, argv, i++, 0, 1000000);
        } else if (strcmp(a, "--instructions") == 0 || strcmp(a, "--budget") == 0) { /* --budget: its older name */
            o.budget = int_arg(argc, argv, i++, 0, INT64_MAX);
        } else if (strcmp(a, "--rules") == 0) {
            o.rules = str_arg(argc, argv, i++);
        } else if (strcmp(a, "--mod") == 0) {
            if (o.mod_count == MAX_MODS) die("at most %d mods", MAX_MODS);
            o.mods[o.mod_count++] = str_arg(argc, argv, i++);
        } else if (strcmp(a, "--mods") == 0) {
            o.mods_dir = str_arg(argc, argv, i++);
        } else if (strcmp(a, "--console") == 0) {
            o.console_port = (int)int_arg(argc, argv, i++, 0, 65535);
            o.realtime = true;
        } else if (strcmp(a, "--realtime") == 0) {
            o.realtime = true;
        } else if (strcmp(a, "--check-determinism") == 0) {
            o.check_determinism = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "asteroids: unknown option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
    }
    if (o.seconds > 0 && !frames_given) o.frames = 0; /* --seconds alone: time decides */
    if (!o.rules) o.rules = find_rules(argv[0], rules_buf, rules_size);
    return o;
}

/* ---- Lua -------------------------------------------------------------------------------- */

static int traceback(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

/* The instruction budget of the rules' top level: the same --instructions as systems. Once spent
 * it raises at every instruction, so a pcall in the file cannot hide it. */
static const char load_budget_key = 'l'; /* registry key (its address): the game loading */

static void load_budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &load_budget_key);
    game *g = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!g) return;
    g->load_used += lua_gethookcount(L);
    if (g->load_used <= g->opt.budget) return;
    lua_sethook(L, load_budget_hook, LUA_MASKCOUNT, 1);
    /* lua_error, not luaL_error: from a hook luaL_error's position is the caller of the running
     * function, so the message would gain a file:line: only when the loop sits in a function */
    lua_pushfstring(L, "its top level ran past the budget of %I instructions", (lua_Integer)g->opt.budget);
    lua_error(L);
}

/* Runs the rules file with the globals `world` and `game` in place; rules that fail stop
 * the game. (Mods go through the mod manager, each in a sandbox of its own.) */
static void run_rules(game *g, const char *path) {
    lua_State *L = g->L;
    int32_t before = kiln_schedule_system_count(g->schedule);
    lua_pushcfunction(L, traceback);
    if (g->opt.budget > 0) {
        g->load_used = 0;
        lua_pushlightuserdata(L, g);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &load_budget_key);
        lua_sethook(L, load_budget_hook, LUA_MASKCOUNT, 1000);
    }
    int status = luaL_loadfilex(L, path, "t");
    if (status == LUA_OK) status = lua_pcall(L, 0, 0, -2);
    if (g->opt.budget > 0) {
        lua_sethook(L, NULL, 0, 0);
        lua_pushnil(L);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &load_budget_key);
    }
    if (status != LUA_OK) die("cannot load rules %s:\n%s", path, lua_tostring(L, -1));
    lua_pop(L, 1);
    int32_t added = kiln_schedule_system_count(g->schedule) - before;
    printf("rules: %s (%d system%s)\n", path, (int)added, added == 1 ? "" : "s");
}

/* mods:METHOD(arg), protected: leaves its two results. Arguments: mods, method, arg. */
static int call_mods(lua_State *L) {
    lua_getfield(L, 1, lua_tostring(L, 2));
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 3);
    lua_call(L, 2, 2);
    return 2;
}

/* Calls mods:method(arg) protected; leaves two results (or nil and the error). */
static void mods_call(game *g, const char *method, const char *arg) {
    lua_State *L = g->L;
    lua_pushcfunction(L, call_mods);
    lua_rawgeti(L, LUA_REGISTRYINDEX, g->mods_ref);
    lua_pushstring(L, method);
    if (arg) lua_pushstring(L, arg);
    else lua_pushnil(L);
    if (lua_pcall(L, 3, 2, 0) != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
    }
}

/* Loads the --mod and --mods mods through the manager; a mod that fails is reported with
 * why, and the game plays on without it. */
static void load_mods(game *g) {
    lua_State *L = g->L;
    for (int i = 0; i < g->opt.mod_count; i++) {
        const char *path = g->opt.mods[i];
        mods_call(g, "load", path);
        if (lua_istable(L, -2)) {
            lua_getfield(L, -2, "systems");
            lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
            say(stdout, "mod: %s (%d system%s)\n", path, (int)n, n == 1 ? "" : "s");
            lua_pop(L, 1);
        } else {
            say(stderr, "asteroids: %s\n", lua_tostring(L, -1)); /* "mods:load: mod 'm': why": named once */
            fprintf(stderr, "asteroids: playing on without mod %s\n", path);
        }
        lua_pop(L, 2);
    }
    if (!g->opt.mods_dir) return;
    mods_call(g, "load_dir", g->opt.mods_dir);
    if (lua_isnil(L, -2)) {
        say(stderr, "asteroids: --mods %s: %s\n", g->opt.mods_dir, lua_tostring(L, -1));
        exit(1);
    }
    lua_Integer n = (lua_Integer)lua_rawlen(L, -2);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -2, i);
        say(stdout, "mod: %s (from %s)\n", lua_tostring(L, -1), g->opt.mods_dir);
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        say(stderr, "asteroids: --mods %s: %s\n", g->opt.mods_dir, lua_tostring(L, -1)); /* "mod 'm': why" */
        say(stderr, "asteroids: playing on without mod %s\n", lua_tostring(L, -2));
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

/* Appends a line to the failures log attached consoles show (the last 100 are kept). */
static void log_failure(game *g, const char *text) {
    lua_State *L = g->L;
    if (!lua_checkstack(L, 4)) return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, g->failures_ref);
    lua_getfield(L, -1, "n");
    lua_Integer n = lua_tointeger(L, -1) + 1;
    lua_pop(L, 1);
    lua_pushstring(L, text);
    lua_rawseti(L, -2, n);
    lua_pushnil(L);
    lua_rawseti(L, -2, n - 100);
    lua_pushinteger(L, n);
    lua_setfield(L, -2, "n");
    lua_pop(L, 1);
}

/* Once a second: mods whose files changed are reloaded (for development), disabled mods'
 * states are released. */
static void poll_mods(game *g) {
    lua_State *L = g->L;
    mods_call(g, "poll", NULL);
    if (lua_istable(L, -2)) {
        lua_Integer n = (lua_Integer)lua_rawlen(L, -2);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -2, i);
            say(stdout, "mod: reloaded %s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            say(stderr, "asteroids: reloading mod %s failed, the old version plays on: %s\n",
                    lua_tostring(L, -2), lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    } else {
        /* nil and a message (or a raised error): the manager could not poll this time (out
         * of memory, closed from the console); the mods loaded play on as they are and the
         * next poll tries again. The same message again is not repeated every second. */
        const char *why = lua_tostring(L, -1);
        char text[300];
        snprintf(text, sizeof text, "polling the mods failed, they play on unchanged: %s", why ? why : "(no message)");
        if (strcmp(text, g->poll_error) != 0) {
            say(stderr, "asteroids: %s\n", text);
            log_failure(g, text);
            memcpy(g->poll_error, text, sizeof text);
        }
        lua_pop(L, 2);
        return;
    }
    g->poll_error[0] = '\0';
    lua_pop(L, 2);
}

/* What mods print goes to stdout, each line of it after "mod NAME: " (a mod name has no space
 * or colon): printed as it came, a mod's "final: score 999999" or "[ 12s] frame ...", a
 * newline first or not, passed for the game's own lines, and its "[shield] ..." for another
 * mod's. */
static int print_mod_line(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    size_t len;
    const char *line = luaL_checklstring(L, 2, &len), *end = line + len;
    do {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        say(stdout, "mod %s: %.*s\n", name, (int)(stop - line), line);
        line = nl ? nl + 1 : end;
    } while (line < end);
    return 0;
}

/* Protected part of the Lua setup (the embedding calls raise on failure). */
static int setup_lua(lua_State *L) {
    game *g = lua_touserdata(L, 1);
    luaL_openlibs(L);
    kiln_lua_push_world(L, g->world, g->opt.workers);
    /* a Lua system stuck in a loop fails instead of freezing; mods cannot lift it */
    kiln_lua_set_instructions(L, -1, g->opt.budget);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "world"); /* also the console's `world` */
    g->schedule = kiln_lua_schedule(L, -1);
    g->world_ref = luaL_ref(L, LUA_REGISTRYINDEX);

    /* `game`: the constants the rules share with C. */
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, (lua_Integer)g->opt.seed);
    lua_setfield(L, -2, "seed");
    lua_pushinteger(L, FRAME_RATE);
    lua_setfield(L, -2, "rate");
    lua_pushinteger(L, g->opt.max_ships);
    lua_setfield(L, -2, "max_ships");
    lua_pushnumber(L, FIELD_SIZE);
    lua_setfield(L, -2, "field_size");
    lua_createtable(L, 3, 0);
    for (int size = 1; size <= 3; size++) {
        lua_pushnumber(L, game_asteroid_radius(size));
        lua_rawseti(L, -2, size);
    }
    lua_setfield(L, -2, "asteroid_radius");
    lua_pushvalue(L, -1);
    lua_setglobal(L, "game");

    /* The mod manager: each mod in a sandbox of its own, granted a copy of `game`, under the
     * same budget as the rules' systems, Score read-only to it; the global `mods` lets
     * consoles see and reload, and the rules make their Waves read-only too. */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "kiln");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "mods");
    lua_rawgeti(L, LUA_REGISTRYINDEX, g->world_ref);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, g->opt.budget > 0 ? (lua_Integer)g->opt.budget : (lua_Integer)1 << 60);
    lua_setfield(L, -2, "instructions");
    lua_pushinteger(L, (lua_Integer)g->opt.seed);
    lua_setfield(L, -2, "seed");
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, -6); /* game */
    lua_setfield(L, -2, "game");
    lua_setfield(L, -2, "allow");
    lua_pushcfunction(L, print_mod_line);
    lua_setfield(L, -2, "log");
    lua_createtable(L, 1, 0); /* the host's Score: mods read it, never change it (rules.lua adds Waves) */
    lua_pushliteral(L, "Score");
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "readonly");
    lua_call(L, 2, 1);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "mods");
    g->mods_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_createtable(L, 100, 1);
    lua_pushinteger(L, 0);
    lua_setfield(L, -2, "n");
    lua_pushvalue(L, -1);
    lua_setglobal(L, "failures");
    g->failures_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* Scripts' math.random draws from the world's seeded streams (world:random: per system
     * inside a Lua system), so a mod cannot make two runs of one seed differ; the seed is
     * the game's. */
    if (luaL_dostring(L, "local w = world\n"
                         "math.random = function(...) return w:random(...) end\n"
                         "math.randomseed = function() error('math.randomseed: the game seeds (--seed)', 2) end"))
        return lua_error(L);
    return 0;
}

/* ---- collide's dropped passes ------------------------------------------------------------ */

/* Reports the frames whose collisions collide dropped for want of memory since the last report.
 * (Score and Waves need no check: mods cannot change them, see setup_lua and rules.lua.) */
static void report_dropped(game *g, const char *when) {
    int64_t dropped = game_systems_dropped(g->systems);
    if (dropped <= g->dropped_seen) return;
    char text[200];
    snprintf(text, sizeof text, "%s: collide ran out of memory and dropped the collisions of %lld frame%s", when,
             (long long)(dropped - g->dropped_seen), dropped - g->dropped_seen == 1 ? "" : "s");
    say(stderr, "asteroids: %s\n", text);
    log_failure(g, text);
    g->dropped_seen = dropped;
}

/* Runs one frame through world:progress (so Lua systems have their world at hand). Lua
 * systems that raised are reported and disabled; the frame itself goes on. */
/* world:progress(dt) looked up and called inside the protected call: nothing a script did
 * to the world can raise outside a pcall (a Lua PANIC). Arguments: world, dt. */
static int progress_frame(lua_State *L) {
    lua_getfield(L, 1, "progress");
    lua_insert(L, 1);
    lua_call(L, 2, 2);
    return 2;
}

static bool step(game *g, int64_t frame) {
    lua_State *L = g->L;
    lua_pushcfunction(L, traceback);
    lua_pushcfunction(L, progress_frame);
    lua_rawgeti(L, LUA_REGISTRYINDEX, g->world_ref);
    lua_pushnumber(L, 1.0 / FRAME_RATE);
    if (lua_pcall(L, 2, 2, -4) != LUA_OK) {
        say(stderr, "asteroids: frame %lld: %s\n", (long long)frame, lua_tostring(L, -1));
        lua_pop(L, 2);
        return false;
    }
    if (!lua_toboolean(L, -2) && lua_istable(L, -1)) {
        lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            lua_getfield(L, -1, "system");
            lua_getfield(L, -2, "message");
            lua_getfield(L, -3, "traceback");
            const char *name = lua_tostring(L, -3);
            say(stderr, "asteroids: frame %lld: Lua system '%s' failed: %s\n%s\n",
                    (long long)frame, name, lua_tostring(L, -2), lua_tostring(L, -1));
            char text[600];
            snprintf(text, sizeof text, "frame %lld: Lua system '%s' failed: %s", (long long)frame, name,
                     lua_tostring(L, -2));
            log_failure(g, text);
            if (kiln_schedule_enable(g->schedule, name, false) == KILN_OK)
                say(stderr, "asteroids: system '%s' disabled\n", name);
            lua_pop(L, 4);
        }
    }
    lua_pop(L, 3);
    char when[32];
    snprintf(when, sizeof when, "frame %lld", (long long)frame);
    report_dropped(g, when);
    return true;
}

/* ---- reports ---------------------------------------------------------------------------- */

static const Score *score_of(const game *g) {
    static const Score none;
    const Score *s = kiln_resource_get(g->world, g->ids.score);
    return s ? s : &none;
}

/* One line per simulated second; everything before the '|' is deterministic. */
static void print_summary(const game *g, int64_t frame, double fps) {
    const Score *s = score_of(g);
    printf("[%3llds] frame %5lld  entities %6lld  ships %4lld  score %7lld  destroyed %5d"
           "  damage %6.0f  lost %4d | %5.1f fps\n",
           (long long)(frame / FRAME_RATE), (long long)frame,
           (long long)kiln_entity_count(g->world), (long long)kiln_query_count(g->count_ships),
           (long long)s->points, (int)s->destroyed, s->damage, (int)s->lost, fps);
    fflush(stdout);
}

static void print_final(const game *g, int64_t frames, double wall, double frame_seconds) {
    const Score *s = score_of(g);
    kiln_world_stats st;
    kiln_world_stats_get(g->world, &st);
    printf("final: frame %lld, entities %lld (asteroids %lld, moons %lld, ships %lld), "
           "archetypes %d\n",
           (long long)frames, (long long)st.entities,
           (long long)kiln_query_count(g->count_asteroids),
           (long long)kiln_query_count(g->count_moons),
           (long long)kiln_query_count(g->count_ships), (int)st.archetypes);
    printf("final: score %lld, asteroids destroyed %d, waves %d, ships launched %d, ships lost %d, "
           "damage %.0f\n",
           (long long)s->points, (int)s->destroyed, (int)s->wave, (int)s->launched, (int)s->lost,
           s->damage);
    if (frames == 0) return;

    double per_frame = frame_seconds / (double)frames * 1e3;
    printf("\n%lld frames in %.2f s wall (%.1f fps), %.2f ms per frame, %d worker%s, "
           "memory %.1f MB\n",
           (long long)frames, wall, (double)frames / wall, per_frame, (int)g->opt.workers,
           g->opt.workers == 1 ? "" : "s", (double)st.bytes / (1024.0 * 1024.0));

    /* Per system: average over its runs; share: of the time all systems took. */
    int32_t n = kiln_schedule_system_count(g->schedule);
    double c_ms = 0, lua_ms = 0; /* per frame */
    for (int32_t i = 0; i < n; i++) {
        kiln_system_info info;
        kiln_schedule_system_info_get(g->schedule, i, &info);
        *(i < g->c_systems ? &c_ms : &lua_ms) += (double)info.total_ns / 1e6 / (double)frames;
    }
    double all_ms = c_ms + lua_ms > 0 ? c_ms + lua_ms : 1.0;
    printf("  %-22s %-4s %5s %10s %7s\n", "system", "kind", "stage", "avg ms", "share");
    for (int32_t i = 0; i < n; i++) {
        kiln_system_info info;
        kiln_schedule_system_info_get(g->schedule, i, &info);
        double avg = info.runs ? (double)info.total_ns / 1e6 / (double)info.runs : 0.0;
        double share = (double)info.total_ns / 1e6 / (double)frames / all_ms;
        printf("  %-22s %-4s %5d %10.3f %6.1f%%%s\n", info.name, i < g->c_systems ? "C" : "Lua",
               (int)info.stage, avg, 100.0 * share, info.enabled ? "" : "  (disabled)");
    }
    /* The rest of a frame: applying buffers, events, the call into Lua. Systems of one stage
     * may overlap on workers, so this can come out below zero; it is shown as 0 then. */
    double outside = per_frame - (c_ms + lua_ms);
    printf("  C systems %.2f ms per frame (%.1f%%), Lua systems %.2f ms (%.1f%%); "
           "outside systems %.2f ms\n",
           c_ms, 100.0 * c_ms / all_ms, lua_ms, 100.0 * lua_ms / all_ms, outside > 0 ? outside : 0.0);
}

/* ---- main ------------------------------------------------------------------------------- */

static kiln_query *count_query(game *g, kiln_component c) {
    kiln_query *q = NULL;
    if (kiln_query_create(g->world, &(kiln_query_desc){.with = {c}}, &q) != KILN_OK)
        die("%s", kiln_world_error(g->world));
    return q;
}

/* Sleeps until t on now_seconds' clock. A handled signal (a profiler's SIGALRM) cuts a sleep
 * short: it goes on to the same deadline (a relative sleep cut short let the frame come early);
 * Ctrl-C ends it. A deadline already past returns at once. */
static void sleep_until(double t) {
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !interrupted) continue;
}

/* Builds a game: the world and its field, the C systems, Lua with the rules and mods, the
 * schedule. Exits with a message when any of it fails. */
static void game_open(game *g) {
    g->world = kiln_world_create(NULL);
    if (!g->world) die("out of memory");
    if (kiln_random_seed(g->world, g->opt.seed) != KILN_OK ||
        game_components_register(g->world, &g->ids) != KILN_OK ||
        game_field_populate(g->world, &g->ids, g->opt.seed, g->opt.asteroids, g->opt.moons) != KILN_OK ||
        !(g->systems = game_systems_create(g->world, &g->ids, NULL, NULL)))
        die("%s", kiln_world_error(g->world));
    g->count_asteroids = count_query(g, g->ids.asteroid);
    g->count_moons = count_query(g, g->ids.orbit);
    g->count_ships = count_query(g, g->ids.ship);

    g->L = luaL_newstate();
    if (!g->L) die("cannot create a Lua state");
    lua_pushcfunction(g->L, setup_lua);
    lua_pushlightuserdata(g->L, g);
    if (lua_pcall(g->L, 1, 0, 0) != LUA_OK) die("%s", lua_tostring(g->L, -1));
    if (game_systems_add(g->systems, g->schedule) != KILN_OK) die("%s", kiln_world_error(g->world));
    g->c_systems = kiln_schedule_system_count(g->schedule);
}

static void game_load_scripts(game *g) {
    run_rules(g, g->opt.rules);
    load_mods(g);
    if (kiln_schedule_build(g->schedule) != KILN_OK) die("%s", kiln_world_error(g->world));
}

static void game_close(game *g) {
    kiln_console_close(g->console);
    lua_close(g->L); /* detaches Lua from the world and ends the schedule and its workers */
    game_systems_destroy(g->systems);
    kiln_query_destroy(g->count_asteroids);
    kiln_query_destroy(g->count_moons);
    kiln_query_destroy(g->count_ships);
    kiln_world_destroy(g->world);
}

/* --check-determinism: the same seed run serially and on workers, frame by frame; the world
 * hashes (kiln_world_hash) must agree after every frame. */
static int check_determinism(const options *opt) {
    game serial = {.opt = *opt}, parallel = {.opt = *opt};
    serial.opt.workers = 0;
    if (parallel.opt.workers < 1) parallel.opt.workers = 1;
    int64_t frames = opt->frames ? opt->frames : 600;
    game_open(&serial);
    game_open(&parallel);
    game_load_scripts(&serial);
    game_load_scripts(&parallel);
    uint64_t hs = kiln_world_hash(serial.world), hp = kiln_world_hash(parallel.world);
    int64_t frame = 0;
    while (hs == hp && frame < frames && !interrupted) {
        frame++;
        if (!step(&serial, frame) || !step(&parallel, frame)) break;
        hs = kiln_world_hash(serial.world);
        hp = kiln_world_hash(parallel.world);
    }
    int status = 0;
    if (hs != hp) {
        printf("determinism: frame %lld differs: serial %016llx, %d worker%s %016llx\n", (long long)frame,
               (unsigned long long)hs, (int)parallel.opt.workers, parallel.opt.workers == 1 ? "" : "s",
               (unsigned long long)hp);
        status = 1;
    } else if (frame < frames && !interrupted) {
        status = 1; /* a frame failed: step printed why */
    } else {
        printf("determinism: %lld frames, serial and %d worker%s agree every frame (hash %016llx)\n",
               (long long)frame, (int)parallel.opt.workers, parallel.opt.workers == 1 ? "" : "s",
               (unsigned long long)hs);
    }
    game_close(&serial);
    game_close(&parallel);
    return status;
}

int main(int argc, char **argv) {
    char rules_buf[4096];
    game g = {.opt = parse_options(argc, argv, rules_buf, sizeof rules_buf)};
    /* a launcher, a service manager or a container stop sends SIGTERM, a closed terminal
     * SIGHUP: ended by either, the game left its console's token file (the secret) behind */
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    signal(SIGHUP, on_interrupt);
    if (g.opt.check_determinism) return check_determinism(&g.opt);

    game_open(&g);
    printf("asteroids: seed %llu, %d asteroids, %lld moons, field %.0fx%.0f, %d worker%s\n",
           (unsigned long long)g.opt.seed, (int)g.opt.asteroids,
           (long long)kiln_query_count(g.count_moons), FIELD_SIZE, FIELD_SIZE, (int)g.opt.workers,
           g.opt.workers == 1 ? "" : "s");
    game_load_scripts(&g);
    char stages[1024];
    kiln_schedule_describe(g.schedule, stages, sizeof stages);
    printf("schedule:\n%s", stages);
    if (g.opt.console_port >= 0) {
        char err[512] = "";
        g.console = kiln_console_open(g.L, &(kiln_console_desc){.port = g.opt.console_port, .log = console_log},
                                      err, sizeof err);
        if (!g.console) die("%s", err);
        int port = kiln_console_port(g.console);
        printf("console: listening on 127.0.0.1:%d (attach: kiln --connect 127.0.0.1:%d)\n", port,
               port);
        printf("console: token in %s (readable by you only; a client sends \"token HEX\" first)\n",
               kiln_console_token_path(g.console));
    }
    fflush(stdout);

    double start = now_seconds(), mark = start, frame_seconds = 0;
    int64_t frame = 0;
    int status = 0;
    while (!interrupted && (g.opt.frames == 0 || frame < g.opt.frames) &&
           (g.opt.seconds == 0 || now_seconds() - start < g.opt.seconds)) {
        double t0 = now_seconds();
        if (!step(&g, frame + 1)) {
            status = 1;
            break;
        }
        frame++;
        frame_seconds += now_seconds() - t0;
        if (g.console) kiln_console_poll(g.console);
        if (frame % FRAME_RATE == 0) {
            poll_mods(&g);
            double t = now_seconds();
            print_summary(&g, frame, FRAME_RATE / (t - mark));
            mark = t;
        }
        if (g.opt.realtime) sleep_until(t0 + 1.0 / FRAME_RATE);
    }
    print_final(&g, frame, now_seconds() - start, frame_seconds);

    game_close(&g);
    return status;
}
