/* kiln_lua.h: the Lua 5.4 embedding API of kiln: open the module, hand a host-owned world
 * to Lua, and reach the schedule Lua systems run in so C systems can join it. */
#ifndef KILN_LUA_H
#define KILN_LUA_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Included with C linkage: neither upstream's lua.h nor LuaJIT's declares it, so a C++ host
 * including this header before lua.hpp would call the Lua API by C++ names a C-built Lua lacks.
 * A host whose Lua is built as C++ includes lua.h itself, before this header. */
#include <lua.h>

/*
 * Functions in this header:
 *   luaopen_kiln, kiln_lua_push_world, kiln_lua_check_world, kiln_lua_schedule,
 *   kiln_lua_set_instructions,
 *   kiln_lua_mods_push, kiln_lua_mods_load, kiln_lua_mods_load_dir, kiln_lua_mods_unload,
 *   kiln_lua_mods_reload, kiln_lua_mods_poll, kiln_lua_mods_readonly,
 *   kiln_console_open, kiln_console_poll, kiln_console_port, kiln_console_token,
 *   kiln_console_token_path, kiln_console_default_token_path, kiln_console_close.
 */

/* The module loader: `local kiln = require "kiln"`. Pushes the module table. */
int luaopen_kiln(lua_State *L);

/* Pushes a kiln.World for a world the host owns: closing the Lua state (or world:close())
 * detaches Lua from it without destroying it; the host destroys it with kiln_world_destroy
 * after closing Lua (or after world:close()). Components the host registered are visible
 * to Lua by name, with their reflected fields. workers sizes the job pool the world's
 * schedule runs C systems on (0: inline). Returns 1 (the world on the stack), or raises a
 * Lua error when out of memory. Loads the kiln module if it was not loaded. One Lua state
 * holds a world at a time: pushed again into the same state, it is the same kiln.World
 * (workers ignored); into another while one holds it, it raises "kiln_lua_push_world: the
 * world is held by another Lua state (...)", the world and that state unchanged. It raises as
 * lua_* functions do: call it from a C function run by lua_pcall to get the error back; called
 * outside any protected call, Lua hands the message to the state's panic function (lua_atpanic)
 * and then aborts, unless that function jumps to the host's recovery point. The state keeps
 * the World until lua_close, whether or not the host or a script keeps a reference to it.
 * A host that destroys the world while Lua still holds it (which it should not do) closes the
 * World with it: later World methods raise "attempt to use a closed world", the script-only values
 * go with the Lua state, and lua_close frees only Lua's own. That holds from any C function Lua
 * runs (a coroutine's too), and with no Lua memory left (the World is closed all the same; what
 * it held is freed by lua_close). While the World has a schedule (a Lua system, a mod manager,
 * or kiln_lua_schedule), kiln_world_destroy refuses, as for any world with a schedule: it
 * asserts, or in a release (NDEBUG) build leaves the world (mods included) whole with the reason
 * in kiln_world_error; close Lua first. */
int kiln_lua_push_world(lua_State *L, kiln_world *world, int32_t workers);

/* The kiln_world of the kiln.World at index idx; raises a Lua error for another value or a
 * closed world. */
kiln_world *kiln_lua_check_world(lua_State *L, int idx);

/* The schedule Lua systems of the kiln.World at idx run in (created on first use). C
 * systems added here with kiln_schedule_add run in the same frames as Lua systems, on the
 * world's job pool, by world:progress(dt) or by the host's own kiln_schedule_run (then the
 * failures of Lua systems are read with world:failures()). Raises when out of memory. For a
 * host's world it lives until lua_close of the state, which destroys it (running the fini of
 * the C systems in it): run it only before that. */
kiln_schedule *kiln_lua_schedule(lua_State *L, int idx);

/* Sets the instruction budget of one Lua system run (0: none) of the kiln.World at idx. For
 * a world the host pushed only the host can set it: world:instructions(n) raises there, so
 * a script cannot lift the budget it runs under. Raises like kiln_lua_check_world. */
void kiln_lua_set_instructions(lua_State *L, int idx, int64_t instructions);

/* ---- mods: sandboxed, budgeted third-party Lua ----------------------------------------- */

/* A mod manager loads mods into Lua states of their own that share the host's world and
 * schedule (docs/modding.md): kiln.mods(world, opts) in Lua, kiln_lua_mods_push in C. */

/* Receives each line a mod prints (without newline, valid during the call). */
typedef void (*kiln_lua_mods_log_fn)(void *user, const char *mod, const char *line);

typedef struct kiln_lua_mods_desc {
    size_t memory;          /* bytes of Lua memory per mod; 0: 64 MiB */
    int64_t instructions;   /* per entry into a mod's code; 0: 10 million */
    int64_t frame_instructions; /* all of one mod's system runs in one frame; 0: 4 x instructions */
    int32_t milliseconds;   /* wall-clock backstop per entry; 0: 1000; -1: none */
    int32_t frame_milliseconds; /* wall clock all of one mod's system runs in one frame may
                                 * take together; 0: milliseconds; -1: none */
    int64_t entities;       /* live entities one mod may have spawned; 0: 1 million */
    int64_t world_memory;   /* bytes one mod may hold in the world (rows of the entities it
                             * spawned, its components on others, its resources, its events
                             * of a frame, the queries it holds); 0: 256 MiB */
    int32_t queries;        /* live queries one mod may hold; 0: 256 */
    int32_t archetypes;     /* once mods made this many archetypes, they may not spawn, add or
                             * remove into a new one (the host's do not count); 0: 8192 */
    int32_t components;     /* new components and event types mods may register in the world,
                             * all together, for good (the world never frees one); 0: 4096 */
    int32_t systems;        /* systems all mods together may have in the schedule, at most
                             * KILN_SCHEDULE_MAX_SYSTEMS; the rest are the host's; 0: 2048 */
    uint64_t seed;          /* seeds each mod's math.random (with its name) */
    kiln_lua_mods_log_fn log; /* NULL: lines are kept in each mod's log only */
    void *log_user;
    const char *const *readonly; /* NULL-terminated names of components (and resources) every mod
                                  * may read but none write, add, remove or despawn an entity
                                  * holding; each must be registered already (at most 64); NULL: none */
} kiln_lua_mods_desc;

/* Pushes a mod manager (a kiln.Mods, as kiln.mods returns) for the kiln.World at world_idx.
 * Raises a Lua error for a bad world, out of memory, or a desc limit that is neither 0 nor
 * one kiln.mods accepts (memory at least 256 KiB, instruction counts at least 1000,
 * milliseconds and frame_milliseconds -1 or more, systems at most 4096, the others
 * positive), naming the field, or a readonly name the world has no component of.
 * Returns 1. */
int kiln_lua_mods_push(lua_State *L, int world_idx, const kiln_lua_mods_desc *desc);

/* The manager's methods from C, each run protected on the kiln.Mods at mods_idx: true when
 * it succeeded; false with the reason in err (size bytes, may be NULL). load_dir's err lists
 * the mods that failed, one per line, and it returns false when any did (the others load).
 * reload returns true when the named mod reloaded; err is then empty, or lists one per line
 * the mods depending on it whose own reload failed (their old versions run on). */
bool kiln_lua_mods_load(lua_State *L, int mods_idx, const char *path, char *err, size_t size);
bool kiln_lua_mods_load_dir(lua_State *L, int mods_idx, const char *dir, char *err, size_t size);
bool kiln_lua_mods_unload(lua_State *L, int mods_idx, const char *name, bool keep, char *err, size_t size);
bool kiln_lua_mods_reload(lua_State *L, int mods_idx, const char *name, char *err, size_t size);
/* Reloads the mods whose files changed and releases disabled mods' states; returns the
 * number reloaded, or -1 with err set when a reload failed (the old version runs on). */
int kiln_lua_mods_poll(lua_State *L, int mods_idx, char *err, size_t size);
/* Makes the component (or resource) name read-only to every mod from now on, as desc.readonly
 * does: between frames, for a component the host registered. False with the reason in err
 * when a loaded mod's system lists it in writes (naming the system and the mod: unload the
 * mod first), or for a name the world lacks or a mod registered; nothing changes then. */
bool kiln_lua_mods_readonly(lua_State *L, int mods_idx, const char *name, char *err, size_t size);

/* ---- console: attach a REPL to a running game ------------------------------------------ */

/* A console accepts REPL clients (`kiln --connect 127.0.0.1:PORT`) on a TCP port and
 * evaluates their lines in the host's lua_State between frames, answering with what the
 * REPL would print. Off unless the host opens one.
 *
 * Protocol. A client sends lines ending in "\n" ("\r\n" is accepted). Its first line must
 * be "token HEX" (the word token, one space, the token; nothing else): the console answers
 * "ok 0\n" and serves the client; a missing or wrong token is answered with an error frame
 * and the connection is closed, with nothing run. Every later line gets one answer frame
 * "STATUS LENGTH\n" followed by LENGTH bytes of text; STATUS is ok, more (the statement
 * goes on over the next line), error or quit. An answer's text holds at most 14 MiB: what
 * a statement printed (or showed) past that is counted, never kept (the game holds at most
 * those 14 MiB of it), and the text ends with a line "... (N bytes not shown)". A client
 * with more than 1 MiB of answers waiting gets no line run until it reads them (it cannot be dropped for its answers, and a client that never
 * reads is dropped once idle_ms pass without a line run). A line that looks like HTTP (a
 * request line or a browser header) closes the connection unrun. The console closes a
 * client with an error frame naming the reason (too many clients, line too long, idle, bad
 * token). */
typedef struct kiln_console kiln_console;

/* What the console reports (bad tokens, HTTP input, dropped clients): one line of text,
 * without a newline, valid during the call. The library never prints. */
typedef void (*kiln_console_log_fn)(void *user, const char *message);

typedef struct kiln_console_desc {
    int port;                 /* 0: any free port (read it with kiln_console_port) */
    const char *bind_address; /* NULL: "127.0.0.1"; an address outside 127/8 needs a token */
    int max_clients;          /* 0: 8; when all are taken, the client longest without its
                               * token gives up its place to a new one */
    union {                   /* instructions one statement may run; 0: 100 million */
        int64_t instructions; /* as kiln_lua_mods_desc and kiln.world{} name a budget */
        int64_t budget;       /* its older name: the same field, still accepted */
    };
    int statement_ms;         /* wall-clock limit of one statement; 0: 1000 */
    int64_t statement_bytes;  /* what one statement may grow Lua's memory by (one string
                               * concatenation is one instruction of the budget); 0: 256 MiB */
    const char *token;        /* NULL: a random 128-bit token (32 hex digits) made at open
                               * and written to token_path; else 16 to 256 printable
                               * characters without spaces, copied, written nowhere */
    const char *token_path;   /* file for a made token, created 0600 and replaced
                               * atomically; NULL: $XDG_RUNTIME_DIR/kiln-console-PORT.token,
                               * or /tmp/kiln-console-PORT-UID.token without that variable */
    int frame_bytes;          /* bytes one kiln_console_poll reads at most; 0: 65536 */
    int frame_us;             /* microseconds one poll serves clients at most; 0: 2000 */
    int max_line;             /* longest line; a longer one drops the client; 0: 65536 */
    int idle_ms;              /* a client with no complete line for this long is dropped;
                               * 0: 1800000 (30 minutes) */
    int auth_ms;              /* time a new client has to send its token; 0: 5000 */
    kiln_console_log_fn log;  /* NULL: events are not reported */
    void *log_user;
} kiln_console_desc;

/* Starts listening; the globals of L are the console's environment (its `world` global is
 * what :stats and friends inspect). Returns NULL, with a reason written to err (may be
 * NULL), when the socket cannot be opened, the token is unusable, a non-loopback address
 * has no token, or the token file cannot be written. */
kiln_console *kiln_console_open(lua_State *L, const kiln_console_desc *desc, char *err,
                                size_t err_size);

/* Serves pending clients without blocking: accepts connections, reads what arrived, runs
 * complete lines and sends the answers, within the desc's per-poll bytes and time (a
 * statement that started runs to its end or its budget). Call once per frame, when the
 * world is consistent (not inside a system). Returns the number of lines evaluated. Called
 * from inside one of its own statements (a host function the statement reached), it does
 * nothing and returns 0. */
int kiln_console_poll(kiln_console *console);

/* The port the console listens on. */
int kiln_console_port(const kiln_console *console);

/* The token clients must send (owned by the console, valid until it closes). */
const char *kiln_console_token(const kiln_console *console);

/* The file the made token was written to, or NULL when the host gave the token. The
 * console removes the file when it closes. */
const char *kiln_console_token_path(const kiln_console *console);

/* Writes to dest (size bytes) the file a console on port writes its made token to when the
 * desc names none: $XDG_RUNTIME_DIR/kiln-console-PORT.token when that is a folder of the
 * user's, else /tmp/kiln-console-PORT-UID.token. Clients (kiln --connect) read it there. */
void kiln_console_default_token_path(int port, char *dest, size_t size);

/* Closes every client and the listening socket and removes the token file (a child forked
 * since leaves the file to the console it forked from, which still serves); call it before
 * lua_close of the console's state. NULL is a no-op. Called from inside one of its own
 * statements, it stops the running poll, which closes the console when it returns. */
void kiln_console_close(kiln_console *console);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LUA_H */
