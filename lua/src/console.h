/* console.h: what the console's files share: the statement budget (console_budget.c), the
 * token (console_token.c), a count for tests (console.c). Invariant: nothing here prints or calls Lua unprotected. */
#ifndef KLUA_CONSOLE_H
#define KLUA_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "klua.h"

/* ---- console_budget.c: one statement's budget ------------------------------------------
 * While a statement runs, a count hook charges its instructions and a wall clock, and a call
 * hook charges the C functions that can run long on one call (string.rep, the pattern
 * functions, table.concat, sort, move, insert, remove) their worst case before they run,
 * known by identity however the statement reaches them; debug.sethook and (LuaJIT) jit.on
 * are refused. Once spent, the budget stays spent: the hook fires at every instruction and
 * raises until control is back in the console. */
enum {
    KLUA_BUDGET_KINDS = 22, /* the library functions the budget knows (console_budget.c) */
    KLUA_BUDGET_IDS = 4,    /* identities learnt of each: the first the libraries held, and
                             * what statements put there since */
};
typedef struct klua_budget {
    int64_t limit;    /* instructions per statement */
    int64_t left;     /* instructions (or charged C steps) still allowed */
    double deadline;  /* monotonic seconds after which the statement is stopped */
    int statement_ms; /* wall-clock limit per statement */
    int64_t growth_max; /* bytes a statement may grow Lua's memory by */
    bool active;      /* a statement is running under this budget */
    bool spent;
    char reason[200]; /* why it was spent: every raise after the first repeats it */
    lua_Alloc alloc;  /* while a statement runs: the state's allocator, which budget_alloc */
    void *alloc_ud;   /* calls, counting what the statement grows Lua's memory by */
    int64_t grown;    /* bytes Lua's memory grew since the statement started (net) */
    int64_t floor;    /* the least grown was since the hook last collected (LuaJIT) */
    bool grew_past;   /* an allocation was refused for taking grown past its limit (a "not
                       * enough memory" the statement ends with is then the limit's) */
    const void *known[KLUA_BUDGET_KINDS][KLUA_BUDGET_IDS]; /* lua_topointer of each, NULL: none */
} klua_budget;

/* Runs feed(session, line) under a budget: the arguments are the feed function, the
 * session, the line's bytes (a light userdata) and length, and the klua_budget (a light
 * userdata); leaves status and text strings (always strings) on the stack.
 * Call with lua_pcall (allocates, may raise out of memory); the hook and the library
 * functions are back as they were when it returns or raises. */
KLUA_HIDDEN int klua_budget_feed(lua_State *L);

/* Registers the klua_budget at argument 1 (a light userdata) as the console budget of L
 * (the hook finds it there), unless one is registered already (a running statement's).
 * Call with lua_pcall (it may allocate). */
KLUA_HIDDEN int klua_budget_register(lua_State *L);

/* Unregisters the klua_budget at argument 1 (a light userdata) if it is the one registered
 * (a console closing leaves another console's alone). Call with lua_pcall. */
KLUA_HIDDEN int klua_budget_unregister(lua_State *L);

/* In a console statement running on L, charges what a read of s makes outside Lua's memory
 * (jansson's parse tree of a JSON text, KLUA_JSON_TREE_BYTES a byte; the copy of a file
 * kiln's *_file calls read) against what the statement may still grow memory by, and raises
 * naming fname when it does not fit, before anything is read. s: the text (n bytes), or, with
 * path, a file's path (opened as kiln opens it; one it cannot open is left to the read). With
 * saves, a text or file starting with kiln's binary magic is a binary save, read in place (a
 * text is not charged, a file its size). Outside a statement it does nothing. Returns the most
 * bytes the read may then take from the file (its size as charged; 1 when it could not be
 * charged, not being a regular file yet: no save), for the loader's max_bytes, so a file grown
 * since is refused; 0 (no limit) for a text or outside a statement. json_max (or NULL): for a
 * file charged as a binary save, the most bytes a JSON one in its place may have to fit (the
 * loader's max_json_bytes: a save swapped for a JSON one since is charged as JSON), else 0. */
KLUA_HIDDEN uint64_t klua_console_charge_read(lua_State *L, const char *fname, const char *s, size_t n, bool path,
                                          bool saves, uint64_t *json_max);
/* The most bytes jansson's parse tree takes per byte of JSON text (78.2 for `[{},{},...]`, with
 * jansson 2.14 and glibc's malloc, counting 8 bytes a block). */
#define KLUA_JSON_TREE_BYTES 80

/* Monotonic seconds. */
KLUA_HIDDEN double klua_console_now(void);

/* ---- console.c -------------------------------------------------------------------------- */

/* Bytes the console has moved down within its clients' answer queues since it opened (the
 * room sent bytes left, reused by a later answer). What a slow reader costs is counted here,
 * not timed: a test bounds it. */
KLUA_HIDDEN size_t klua_console_moved(const kiln_console *c);

/* ---- console_token.c: the console's secret ---------------------------------------------- */

enum { KLUA_TOKEN_MAX = 256 };

/* Fills hex (33 bytes) with 128 random bits as 32 hex digits; false when the system has no
 * randomness to give. */
KLUA_HIDDEN bool klua_token_make(char *hex);

/* Checks a host-given token: 16 to KLUA_TOKEN_MAX printable characters, no spaces. */
KLUA_HIDDEN bool klua_token_valid(const char *token);

/* Writes token to path as a file only the user can read, replacing any file there
 * atomically (a fresh file renamed over it). Returns 0 or an errno value. */
KLUA_HIDDEN int klua_token_write(const char *path, const char *token);

/* The default token file for port: $XDG_RUNTIME_DIR/kiln-console-PORT.token when that
 * variable names an absolute folder, else /tmp/kiln-console-PORT-UID.token. */
KLUA_HIDDEN void klua_token_default_path(char *path, size_t size, int port);

/* True when given (n bytes) equals token; takes the same time for every given of a length. */
KLUA_HIDDEN bool klua_token_equal(const char *given, size_t n, const char *token);

#endif /* KLUA_CONSOLE_H */
