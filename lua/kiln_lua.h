/* kiln_lua.h: the Lua 5.4 embedding API of kiln: open the module, hand a host-owned world
 * to Lua, and reach the schedule Lua systems run in so C systems can join it. */
#ifndef KILN_LUA_H
#define KILN_LUA_H

#include <lua.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   luaopen_kiln, kiln_lua_push_world, kiln_lua_check_world, kiln_lua_schedule,
 *   kiln_console_open, kiln_console_poll, kiln_console_port, kiln_console_close.
 */

/* The module loader: `local kiln = require "kiln"`. Pushes the module table. */
int luaopen_kiln(lua_State *L);

/* Pushes a kiln.World for a world the host owns: closing the Lua state (or world:close())
 * detaches Lua from it without destroying it; the host destroys it with kiln_world_destroy
 * after closing Lua (or after world:close()). Components the host registered are visible
 * to Lua by name, with their reflected fields. workers sizes the job pool the world's
 * schedule runs C systems on (0: inline). Returns 1 (the world on the stack), or raises a
 * Lua error when out of memory. Loads the kiln module if it was not loaded. */
int kiln_lua_push_world(lua_State *L, kiln_world *world, int32_t workers);

/* The kiln_world of the kiln.World at index idx; raises a Lua error for another value or a
 * closed world. */
kiln_world *kiln_lua_check_world(lua_State *L, int idx);

/* The schedule Lua systems of the kiln.World at idx run in (created on first use). C
 * systems added here with kiln_schedule_add run in the same frames as Lua systems, on the
 * world's job pool, by world:progress(dt) or by the host's own kiln_schedule_run (then the
 * failures of Lua systems are read with world:failures()). Raises when out of memory. */
kiln_schedule *kiln_lua_schedule(lua_State *L, int idx);

/* ---- console: attach a REPL to a running game ------------------------------------------ */

/* A console accepts REPL clients (`kiln --connect 127.0.0.1:PORT`) on a local TCP port and
 * evaluates their lines in the host's lua_State between frames, answering with what the
 * REPL would print. Off unless the host opens one. */
typedef struct kiln_console kiln_console;

typedef struct kiln_console_desc {
    int port;                 /* 0: any free port (read it with kiln_console_port) */
    const char *bind_address; /* NULL: "127.0.0.1"; anything else exposes the game */
    int max_clients;          /* 0: 8 */
    int64_t budget;           /* instructions one statement may run; 0: 100 million */
} kiln_console_desc;

/* Starts listening; the globals of L are the console's environment (its `world` global is
 * what :stats and friends inspect). Returns NULL, with a reason written to err (may be
 * NULL), when the socket cannot be opened. */
kiln_console *kiln_console_open(lua_State *L, const kiln_console_desc *desc, char *err,
                                size_t err_size);

/* Serves pending clients without blocking: accepts connections, reads what arrived, runs
 * each complete line and sends the answer. Call once per frame, when the world is
 * consistent (not inside a system). Returns the number of lines evaluated. */
int kiln_console_poll(kiln_console *console);

/* The port the console listens on. */
int kiln_console_port(const kiln_console *console);

/* Closes every client and the listening socket. NULL is a no-op. */
void kiln_console_close(kiln_console *console);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LUA_H */
