/* console_budget.c: the budget one console statement runs under: counted instructions, a
 * wall clock, and C functions charged their worst case before they run. Invariant: once a
 * statement's budget is spent, every instruction it runs raises until the console has it back. */
#include <lualib.h>
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "console.h"
#include "../../core/src/number_text.h" /* (header-only: no call into core internals) */

enum {
    HOOK_COUNT = 100,             /* instructions between two checks of the budget */
    /* counted instructions, and every call: the C functions that can run long on one call
     * are charged before they run (Lua 5.4 reports tail calls under LUA_MASKCALL too) */
    BUDGET_MASK = LUA_MASKCOUNT | LUA_MASKCALL,
};

static const char BUDGET_KEY = 0; /* registry: light userdata of the klua_budget */
static const char KNOWN_KEY = 0;  /* registry: the set of functions known (function -> true),
                                   * kept alive (LuaJIT: their identity is their address); a
                                   * set, as every console learns them again */


double klua_console_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static klua_budget *current(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    klua_budget *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return b && b->active ? b : NULL;
}

/* Pushes the set of functions known, made if there is none. */
static void push_known(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &KNOWN_KEY) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &KNOWN_KEY);
}

int klua_budget_register(lua_State *L) {
    lua_settop(L, 1);
    /* made with the console, so that no statement adds a key to the registry: a registry
     * grown inside one may be refused (under LuaJIT that loses the refs of keys it moves) */
    push_known(L);
    lua_pop(L, 1);
    /* a console opened from inside another's statement leaves that statement's budget in
     * place (the key exists then, so arming later allocates nothing either way) */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    if (!lua_isnil(L, -1)) return 0;
    lua_pop(L, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    return 0;
}

int klua_budget_unregister(lua_State *L) {
    void *b = lua_touserdata(L, 1);
    lua_settop(L, 0);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    if (lua_touserdata(L, 1) != b) return 0;
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    return 0;
}

static void budget_hook(lua_State *L, lua_Debug *ar);

/* Spends the budget for good: from here every instruction of every thread that runs the
 * hook raises, so a pcall around the statement's loop catches one error, then meets another. */
static KLUA_NORETURN void exhaust(lua_State *L, klua_budget *b, const char *why) {
    if (!b->spent) {
        if (why) snprintf(b->reason, sizeof b->reason, "%s", why);
        else snprintf(b->reason, sizeof b->reason, "console: the statement ran past its instruction budget");
    }
    b->left = 0;
    b->spent = true;
    lua_sethook(L, budget_hook, BUDGET_MASK, 1);
    lua_pushstring(L, b->reason);
    lua_error(L);
    for (;;) {}
}

static void on_call(lua_State *L, klua_budget *b, lua_Debug *ar);

static KLUA_NORETURN void overdue(lua_State *L, klua_budget *b) {
    char why[96];
    snprintf(why, sizeof why, "console: the statement ran past its time limit (%d ms)", b->statement_ms);
    exhaust(L, b, why);
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
    klua_budget *b = current(L);
    if (!b) {
        /* a coroutine made by a statement, resumed after it: the budget is not its business */
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    if (b->spent) exhaust(L, b, NULL);
    if (ar->event != LUA_HOOKCOUNT) {
        /* the clock too: C functions calling C functions (metamethods) run no instruction */
        if (klua_console_now() > b->deadline) overdue(L, b);
        on_call(L, b, ar);
        return;
    }
    b->left -= lua_gethookcount(L);
    if (b->left <= 0) exhaust(L, b, NULL);
#if KLUA_LUAJIT
    /* Lua 5.4 collects when budget_alloc refuses and tries again; LuaJIT raises at once, and
     * its collector waits until the heap has doubled: over a game holding more than the limit,
     * a statement's garbage alone ran it out. So the hook collects once the statement grew
     * halfway from the least it had grown since the last such collection to the limit. */
    if (b->grown > b->floor + (b->growth_max - b->floor) / 2) {
        lua_gc(L, LUA_GCCOLLECT, 0);
        b->floor = b->grown;
    }
#endif
    if (klua_console_now() > b->deadline) overdue(L, b);
}

bool klua_console_active(lua_State *L) { return current(L) != NULL; }

uint64_t klua_console_charge_read(lua_State *L, const char *fname, const char *s, size_t n, bool path,
                                  bool saves, uint64_t *json_max) {
    const klua_budget *b = current(L);
    if (json_max) *json_max = 0;
    if (!b) return 0;
    int64_t left = b->growth_max > b->grown ? b->growth_max - b->grown : 0;
    uint64_t size = n;
    const char *head = s;
    char first[8];
    if (path) { /* opened as kiln opens it: a pipe would block, only a regular file is read */
        int fd = open(s, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) return 1; /* (the read refuses it, unless it appears meanwhile: then too) */
        ssize_t got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, first, sizeof first) : -1;
        close(fd);
        if (got < 0) return 1;
        n = (size_t)got;
        size = (uint64_t)st.st_size;
        head = first;
    }
    bool binary = saves && n > 0 && memcmp(head, "KILNSAVE", n < 8 ? n : 8) == 0;
    if (binary && !path) return 0;
    uint64_t per = binary ? 1 : KLUA_JSON_TREE_BYTES + path;
    uint64_t need = size > UINT64_MAX / per ? UINT64_MAX : size * per;
    if (need <= (uint64_t)left && binary && json_max) { /* (0 would be no limit: 1 refuses every JSON save) */
        uint64_t fits = (uint64_t)left / (KLUA_JSON_TREE_BYTES + 1);
        *json_max = fits ? fits : 1;
    }
    if (need <= (uint64_t)left) return !path ? 0 : size ? size : 1;
    char why[200]; /* (lua_pushfstring knows no 64-bit formats) */
    snprintf(why, sizeof why, "%s of %llu bytes may take %llu bytes to read, past what the console statement may "
             "still grow memory by (%lld bytes, of its statement_bytes)", binary ? "a file" : "a JSON text",
             (unsigned long long)size, (unsigned long long)need, (long long)left);
    klua_fail(L, fname, "%s", why);
}

const char *klua_console_overdue(lua_State *L) {
    klua_budget *b = current(L);
    if (!b) return NULL;
    if (!b->spent) {
        if (klua_console_now() <= b->deadline) return NULL;
        snprintf(b->reason, sizeof b->reason, "console: the statement ran past its time limit (%d ms)",
                 b->statement_ms);
        b->left = 0;
        b->spent = true;
        lua_sethook(L, budget_hook, BUDGET_MASK, 1);
    }
    return b->reason;
}

/* ---- charged library functions --------------------------------------------------------- */

typedef klua_costly charged;

static const struct {
    const char *lib, *name;
    charged kind;
} CHARGED[] = {
    {LUA_STRLIBNAME, "rep", KLUA_COST_REP},       {LUA_STRLIBNAME, "find", KLUA_COST_FIND},
    {LUA_STRLIBNAME, "match", KLUA_COST_MATCH},   {LUA_STRLIBNAME, "gmatch", KLUA_COST_GMATCH},
    {LUA_STRLIBNAME, "gsub", KLUA_COST_GSUB},     {LUA_TABLIBNAME, "concat", KLUA_COST_CONCAT},
    {LUA_TABLIBNAME, "sort", KLUA_COST_SORT},     {LUA_TABLIBNAME, "move", KLUA_COST_MOVE},
    {LUA_TABLIBNAME, "insert", KLUA_COST_INSERT}, {LUA_TABLIBNAME, "remove", KLUA_COST_REMOVE},
    {LUA_DBLIBNAME, "sethook", KLUA_COST_SETHOOK},   {LUA_GNAME, "setmetatable", KLUA_COST_SETMETATABLE},
    {LUA_DBLIBNAME, "setmetatable", KLUA_COST_DEBUG_SETMETATABLE}, {LUA_COLIBNAME, "resume", KLUA_COST_RESUME},
    {"jit", "on", KLUA_COST_JIT_ON}, /* LuaJIT */
    {LUA_GNAME, "load", KLUA_COST_LOAD},          {LUA_GNAME, "newproxy", KLUA_COST_NEWPROXY}, /* LuaJIT */
    {LUA_GNAME, "xpcall", KLUA_COST_XPCALL},      {LUA_COLIBNAME, "create", KLUA_COST_CREATE},
    {LUA_COLIBNAME, "wrap", KLUA_COST_WRAP},      {LUA_GNAME, "loadfile", KLUA_COST_LOADFILE},
    {LUA_GNAME, "dofile", KLUA_COST_DOFILE},
};
enum { CHARGED_COUNT = sizeof CHARGED / sizeof CHARGED[0] };
_Static_assert((int)CHARGED_COUNT == (int)KLUA_BUDGET_KINDS, "console.h sizes the known functions by this table");

/* The kind of the function whose identity is id, or -1. */
static int kind_of(const klua_budget *b, const void *id) {
    for (int k = 0; k < CHARGED_COUNT; k++)
        for (int i = 0; i < KLUA_BUDGET_IDS && b->known[k][i]; i++)
            if (b->known[k][i] == id) return k;
    return -1;
}

/* Learns the C functions the libraries hold now (the standard ones: no upvalues, LuaJIT's
 * newproxy aside) by their identity, so that every call of one is charged however the statement reaches it: through
 * the library, a local the game kept, an upvalue, a C frame's slot. The libraries are left
 * as they are. Called before each statement; what a statement changed in a library is
 * learnt too, up to KLUA_BUDGET_IDS functions a kind. */
static void learn(lua_State *L, klua_budget *b) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    int loaded = lua_gettop(L);
    for (int k = 0; k < CHARGED_COUNT; k++) {
        lua_settop(L, loaded);
        lua_pushstring(L, CHARGED[k].lib);
        if (lua_rawget(L, loaded) != LUA_TTABLE) continue;
        lua_pushstring(L, CHARGED[k].name);
        lua_rawget(L, -2);
        if (!lua_iscfunction(L, -1)) continue;
        if (CHARGED[k].kind != KLUA_COST_NEWPROXY && lua_getupvalue(L, -1, 1)) continue; /* (LuaJIT's has one) */
        const void *id = lua_topointer(L, -1);
        int i = 0;
        while (i < KLUA_BUDGET_IDS && b->known[k][i] && b->known[k][i] != id) i++;
        if (i == KLUA_BUDGET_IDS || b->known[k][i]) continue;
        push_known(L); /* (made again only if a statement took it out of the registry) */
        lua_pushvalue(L, -2);
        lua_pushboolean(L, 1);
        lua_rawset(L, -3);
        b->known[k][i] = id;
    }
    lua_settop(L, loaded - 1);
}

#if !KLUA_LUAJIT
/* A statement's xpcall message handler, called while the budget lasts. Lua 5.4 calls the
 * handler again for an error the handler raises, and with hooks off when the hook raised it:
 * a handler looping past the budget, stopped there, ran on for good. Once the budget is
 * spent the message goes on as it is. Upvalue 1 the handler. */
static int statement_handler(lua_State *L) {
    klua_budget *b = current(L);
    if (b && b->spent) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}
#endif

#if !KLUA_LUAJIT
#define LONG_TEXT 65536 /* bytes past which load parses a text without a name in pieces too */
enum { PIECE = 512, UP_TEXT = 1, UP_AT, UP_JUMPS };

/* Whether the load about to run (arguments from 1) is handed its text in pieces: a text with
 * a name (the session's own compile), or a long one. */
static bool load_in_pieces(lua_State *L) {
    return lua_type(L, 1) == LUA_TSTRING &&
           ((lua_gettop(L) >= 2 && !lua_isnil(L, 2)) || lua_rawlen(L, 1) > LONG_TEXT);
}

static bool word_byte(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* load's reader in place of such a text: the text in pieces of about 512 bytes (a word whole
 * in one), so that the call hook reads the clock between them (the parser runs no hook, and an
 * and-chain of 100k terms took it 18 s). Each piece's jump words are charged as it is handed
 * over, what they add to the parse (k * k / 4 for k so far): counted over the whole text before
 * the call, 16 MB took 0.33 s (5 s under ASan) past a 100 ms limit that no hook could read.
 * Upvalues (UP_): the text, the offset, the jump words so far. */
static int text_pieces(lua_State *L) {
    size_t n;
    const char *s = lua_tolstring(L, lua_upvalueindex(UP_TEXT), &n);
    size_t at = (size_t)lua_tointeger(L, lua_upvalueindex(UP_AT));
    if (!s || at >= n) return 0;
    size_t end = at + (n - at < PIECE ? n - at : PIECE);
    while (end < n && word_byte(s[end - 1]) && word_byte(s[end])) end++;
    double before = lua_tonumber(L, lua_upvalueindex(UP_JUMPS)), k = before + klua_jump_words(s + at, end - at);
    klua_budget *b = current(L);
    double cost = (k * k - before * before) / 4;
    if (b && !(cost <= (double)b->left)) { /* spent: load would catch a plain error, the statement go on */
        char why[200], num[32]; /* lua_pushfstring knows no %g precision */
        snprintf(why, sizeof why, "console: %s.load could take %s steps (its jump lists read to byte %zu of %zu), "
                 "past what is left of the statement's instruction budget", LUA_GNAME,
                 kl_number_text(num, sizeof num, "%.3g", k * k / 4), end, n);
        exhaust(L, b, why);
    }
    if (b) b->left -= (int64_t)cost;
    lua_pushinteger(L, (lua_Integer)end);
    lua_replace(L, lua_upvalueindex(UP_AT));
    lua_pushnumber(L, k);
    lua_replace(L, lua_upvalueindex(UP_JUMPS));
    lua_pushlstring(L, s + at, end - at);
    return 1;
}
#endif

/* The calls that would take the statement out of its budget: changing the hook; turning
 * LuaJIT's compiler on (compiled code calls no hook); under LuaJIT, load given a reader and
 * newproxy with a metatable (a __gc set there later); under Lua 5.4, xpcall's handler, which
 * runs with hooks off for an error the hook raised (it is wrapped); a __gc finalizer (Lua runs
 * finalizers with hooks off); resuming a coroutine made before the statement, which has no
 * hook yet (it gets the budget's). */
static void guard(lua_State *L, klua_budget *b, charged kind) {
    if (kind == KLUA_COST_SETHOOK)
        luaL_error(L, "debug.sethook is not available in the console (the statement budget owns the hook)");
    if (kind == KLUA_COST_JIT_ON)
        luaL_error(L, "jit.on is not available in the console (compiled code runs outside the statement budget)");
#if KLUA_LUAJIT
    /* LuaJIT leaves its hook marked active when an error the hook raised is caught by
     * lua_load: the budget spent inside a reader function would end the count for good */
    if (kind == KLUA_COST_LOAD && lua_type(L, 1) == LUA_TFUNCTION)
        luaL_error(L, "console: load with a reader function is not available under LuaJIT (the statement "
                      "budget could not stop the statement after it); give load a string");
#endif
#if !KLUA_LUAJIT
    /* the handler is the call's argument 2, in the frame the hook sees: wrapped in place */
    if (kind == KLUA_COST_XPCALL && lua_gettop(L) >= 2 && !lua_isnil(L, 2)) {
        lua_pushvalue(L, 2);
        lua_pushcclosure(L, statement_handler, 1);
        lua_replace(L, 2);
    }
    /* a named text is parsed through a reader of its pieces (text_pieces); so is a long text
     * without a name (named "=(load)" then, not after itself): the charge by its length
     * assumed a parse 4 times as fast as plain statements take (60 MB held the game 3.8 s).
     * A short one keeps its own name, its parse bounded by the charge */
    if (kind == KLUA_COST_LOAD && load_in_pieces(L)) {
        lua_pushvalue(L, 1);
        lua_pushinteger(L, 0);
        lua_pushnumber(L, 0);
        lua_pushcclosure(L, text_pieces, UP_JUMPS);
        lua_replace(L, 1);
    }
    /* a coroutine's body runs protected, so that the budget stopping it leaves its hooks on
     * (klua_coroutine_body): wrapped in place too */
    if ((kind == KLUA_COST_CREATE || kind == KLUA_COST_WRAP) && lua_type(L, 1) == LUA_TFUNCTION) {
        lua_pushvalue(L, 1);
        lua_pushcclosure(L, klua_coroutine_body, 1);
        lua_replace(L, 1);
    }
#endif
    /* LuaJIT: a proxy with a metatable takes a __gc set in it later (only false makes none) */
    if (kind == KLUA_COST_NEWPROXY && lua_toboolean(L, 1))
        luaL_error(L, "console: newproxy with a metatable is not available (a __gc finalizer set in it would "
                      "run outside the statement budget)");
    if ((kind == KLUA_COST_SETMETATABLE || kind == KLUA_COST_DEBUG_SETMETATABLE) && lua_type(L, 2) == LUA_TTABLE) {
        lua_pushstring(L, "__gc");
        bool gc = lua_rawget(L, 2) != LUA_TNIL;
        lua_pop(L, 1);
        if (gc)
            luaL_error(L, "console: a statement cannot set a __gc finalizer (Lua runs finalizers outside "
                          "the statement budget)");
    }
    if (kind == KLUA_COST_RESUME && lua_type(L, 1) == LUA_TTHREAD) {
        lua_State *co = lua_tothread(L, 1);
        if (lua_gethook(co) == NULL) lua_sethook(co, budget_hook, BUDGET_MASK, b->spent ? 1 : HOOK_COUNT);
    }
}

/* Charges the call of kind about to run (its arguments from index 1) its worst case, or
 * raises when that does not fit. */
static void charge(lua_State *L, klua_budget *b, charged kind) {
    /* a short text is charged as it is (its jump lists refuse a quadratic parse at once); one
     * the guard hands over in pieces, its length (its jump lists as each piece is read) */
    if (kind != KLUA_COST_LOAD) guard(L, b, kind);
    double steps, bytes;
#if !KLUA_LUAJIT
    if (kind == KLUA_COST_LOAD && load_in_pieces(L)) { /* read: the parse is charged piece by piece */
        steps = (double)lua_rawlen(L, 1) / KLUA_COST_BYTES_PER_STEP;
        bytes = 0;
    } else
#endif
        klua_cost(L, kind, (double)b->left, &steps, &bytes);
    const char *name = CHARGED[kind].name, *lib = CHARGED[kind].lib;
    char why[160], num[32]; /* lua_pushfstring knows no %g precision */
    if (bytes > KLUA_COST_RESULT_MAX) {
        snprintf(why, sizeof why, "console: %s.%s could build %s bytes, more than one call may in the "
                 "console (%.0f)", lib, name, kl_number_text(num, sizeof num, "%.3g", bytes), KLUA_COST_RESULT_MAX);
        klua_raise(L, "%s", why); /* a budget's stop: no chunk:line: */
    }
    double cost = steps + bytes / KLUA_COST_BYTES_PER_STEP;
    if (!(cost <= (double)b->left && cost < 9223372036854775808.0)) { /* a NaN, or 2^63: no int64_t */
        snprintf(why, sizeof why, "console: %s.%s could take %s steps, past what is left of the "
                 "statement's instruction budget", lib, name, kl_number_text(num, sizeof num, "%.3g", cost));
        klua_raise(L, "%s", why); /* a budget's stop: no chunk:line: */
    }
    b->left -= (int64_t)cost;
    if (kind == KLUA_COST_LOAD) guard(L, b, kind);
}

/* A call about to run: a known C function is charged; a C function holding a coroutine as
 * its first upvalue (what coroutine.wrap makes, perhaps before the statement) gets the
 * budget's hook into that coroutine before it resumes it. */
static void on_call(lua_State *L, klua_budget *b, lua_Debug *ar) {
    if (!lua_getinfo(L, "f", ar)) return;
    int kind = -1;
    if (lua_iscfunction(L, -1)) {
        kind = kind_of(b, lua_topointer(L, -1));
        if (lua_getupvalue(L, -1, 1)) {
            lua_State *co = lua_tothread(L, -1);
            if (co && lua_gethook(co) == NULL) lua_sethook(co, budget_hook, BUDGET_MASK, b->spent ? 1 : HOOK_COUNT);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (kind >= 0) charge(L, b, (charged)kind);
}

/* ---- one statement ------------------------------------------------------------------------ */

enum { ARG_FEED = 1, ARG_SESSION, ARG_LINE, ARG_LENGTH, ARG_BUDGET, SLOT_PRINT };

/* The state's allocator while a statement runs: refuses growth past the budget's growth_max
 * (Lua then collects and tries again, and raises "not enough memory" when it still fails).
 * The instruction count cannot bound it: one concatenation is one instruction whatever its
 * size, so `s = s .. s` in a loop of 30 built a GiB string in a few instructions and held
 * the game for many times the time limit in memcpy and page faults, past any hook. */
static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    klua_budget *b = ud;
    int64_t old = ptr ? (int64_t)osize : 0;
    if (nsize > (size_t)old && b->grown + ((int64_t)nsize - old) > b->growth_max) {
        b->grew_past = true;
        return NULL;
    }
    void *p = b->alloc(b->alloc_ud, ptr, osize, nsize);
    if (p || nsize == 0) b->grown += (int64_t)nsize - old;
    if (b->grown < b->floor) b->floor = b->grown;
    return p;
}

lua_Alloc klua_lasting_allocf(lua_State *L, void **ud) {
    lua_Alloc fa = lua_getallocf(L, ud);
    while (fa == budget_alloc) { /* a statement polling another console wraps the wrapper */
        const klua_budget *b = *ud;
        fa = b->alloc;
        *ud = b->alloc_ud;
    }
    return fa;
}

/* Runs feed(session, line) with the budget armed; returns the pcall status with the two
 * results (or the message) on top. What may raise (out of memory) comes before anything is
 * armed, so a raise leaves the state's allocator, hook and registered budget as they were. */
static int run_armed(lua_State *L, klua_budget *b, const char *line, size_t n) {
    /* the budget registered before (another console's statement may be running: this one was
     * polled from it) is registered again after, or that statement would run on unbudgeted */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    void *before = lua_touserdata(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, ARG_FEED);
    lua_pushvalue(L, ARG_SESSION);
    lua_pushlstring(L, line, n);
    klua_compat_budget_jit_off(L); /* LuaJIT: the JIT off even if the game turned it on */
    klua_compat_hook_revive(L);    /* LuaJIT: hooks the game's own code left stopped run again */
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    /* LuaJIT: the state's first count hook adds a registry key (the JIT is off for good), which
     * may grow the registry and raise; no Lua runs until the call, so no hook fires unarmed */
    lua_sethook(L, budget_hook, BUDGET_MASK, HOOK_COUNT);
    b->left = b->limit;
    b->spent = false;
    b->deadline = klua_console_now() + b->statement_ms / 1000.0;
    b->active = true;
    lua_pushlightuserdata(L, b);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY); /* the key exists: no allocation */
    b->alloc = lua_getallocf(L, &b->alloc_ud);
    b->grown = b->floor = 0;
    b->grew_past = false;
    lua_setallocf(L, budget_alloc, b);
    int status = lua_pcall(L, 2, 2, 0); /* raises nothing: every exit passes what follows */
    lua_sethook(L, old_hook, old_mask, old_count);
    lua_setallocf(L, b->alloc, b->alloc_ud);
    b->active = false;
    if (before) lua_pushlightuserdata(L, before);
    else lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY); /* the key exists: no allocation */
    return status;
}

static void push_growth_message(lua_State *L, const klua_budget *b) {
    char bytes[32];
    if (b->growth_max % (1 << 20) == 0) snprintf(bytes, sizeof bytes, "%lld MiB", (long long)(b->growth_max >> 20));
    else snprintf(bytes, sizeof bytes, "%lld bytes", (long long)b->growth_max);
    lua_pushfstring(L, "console: the statement grew Lua's memory past its limit (%s)", bytes);
}

/* A request a console client makes between the lines of a statement (session:feed hands it
 * to the command handler whatever the statement holds): a Tab or a watch stopped by the
 * budget answers an error and leaves the statement being typed as it is. */
static bool driver_request(const char *line, size_t n) {
    return (n == 5 && memcmp(line, ":poll", 5) == 0) || (n >= 10 && memcmp(line, ":complete ", 10) == 0);
}

int klua_budget_feed(lua_State *L) {
    lua_settop(L, ARG_BUDGET);
    klua_budget *b = lua_touserdata(L, ARG_BUDGET);
    const char *line = lua_touserdata(L, ARG_LINE);
    size_t n = (size_t)lua_tointeger(L, ARG_LENGTH);
    lua_pushglobaltable(L);
    lua_pushstring(L, "print");
    lua_rawget(L, -2);
    lua_remove(L, -2); /* SLOT_PRINT */
    learn(L, b);
    int status = run_armed(L, b, line, n);
    if (status == LUA_OK) {
        /* the session caught the refusal: say which limit it was */
        if (b->grew_past && lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "error") == 0 &&
            lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "not enough memory") == 0) {
            lua_pop(L, 1);
            push_growth_message(L, b);
        }
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pushliteral(L, "error");
            lua_replace(L, -3);
        }
        if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER) {
            lua_pop(L, 1);
            lua_pushliteral(L, "");
        }
        return 2;
    }
    /* the statement was stopped where it stood: put back the print the session had captured,
     * and (unless it was the driver's request) drop what was typed of a statement over several
     * lines (under a fresh budget: the session's own code may have been changed by the statement) */
    /* (LuaJIT: a memory error raised again outside the session's own pcall is a runtime
     * error with the same message, lua_error keeping no memory status) */
    bool grew_past = b->grew_past && (status == LUA_ERRMEM || (KLUA_LUAJIT && status == LUA_ERRRUN &&
                                                               lua_type(L, -1) == LUA_TSTRING &&
                                                               strcmp(lua_tostring(L, -1), "not enough memory") == 0));
    if (lua_type(L, -1) != LUA_TSTRING || grew_past) {
        lua_pop(L, 1);
        if (grew_past) push_growth_message(L, b);
        else lua_pushliteral(L, "error (not a string)");
    }
    int message = lua_gettop(L);
    lua_pushglobaltable(L);
    lua_pushstring(L, "print");
    lua_pushvalue(L, SLOT_PRINT);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    if (!driver_request(line, n)) {
        if (run_armed(L, b, ":reset", 6) == LUA_OK) lua_pop(L, 2);
        else lua_pop(L, 1);
    }
    lua_pushliteral(L, "error");
    lua_pushvalue(L, message);
    return 2;
}
