/* console_budget.c: the budget one console statement runs under: counted instructions, a
 * wall clock, and C functions charged their worst case before they run. Invariant: once a
 * statement's budget is spent, every instruction it runs raises until the console has it back. */
#include <lualib.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "console.h"

enum {
    HOOK_COUNT = 100,             /* instructions between two checks of the budget */
};

static const char BUDGET_KEY = 0; /* registry: light userdata of the klua_budget */

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

int klua_budget_register(lua_State *L) {
    lua_settop(L, 1);
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
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(L, b->reason);
    lua_error(L);
    for (;;) {}
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    klua_budget *b = current(L);
    if (!b) {
        /* a coroutine made by a statement, resumed after it: the budget is not its business */
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    if (b->spent) exhaust(L, b, NULL);
    b->left -= lua_gethookcount(L);
    if (b->left <= 0) exhaust(L, b, NULL);
    if (klua_console_now() > b->deadline) {
        char why[96];
        snprintf(why, sizeof why, "console: the statement ran past its time limit (%d ms)", b->statement_ms);
        exhaust(L, b, why);
    }
}

/* ---- wrapped library functions ---------------------------------------------------------- */

typedef klua_costly wrapped;

static const struct {
    const char *lib, *name;
    wrapped kind;
} WRAPPED[] = {
    {LUA_STRLIBNAME, "rep", KLUA_COST_REP},       {LUA_STRLIBNAME, "find", KLUA_COST_FIND},
    {LUA_STRLIBNAME, "match", KLUA_COST_MATCH},   {LUA_STRLIBNAME, "gmatch", KLUA_COST_GMATCH},
    {LUA_STRLIBNAME, "gsub", KLUA_COST_GSUB},     {LUA_TABLIBNAME, "concat", KLUA_COST_CONCAT},
    {LUA_TABLIBNAME, "sort", KLUA_COST_SORT},     {LUA_TABLIBNAME, "move", KLUA_COST_MOVE},
    {LUA_TABLIBNAME, "insert", KLUA_COST_INSERT}, {LUA_TABLIBNAME, "remove", KLUA_COST_REMOVE},
    {LUA_DBLIBNAME, "sethook", KLUA_COST_SETHOOK},   {LUA_GNAME, "setmetatable", KLUA_COST_SETMETATABLE},
    {LUA_DBLIBNAME, "setmetatable", KLUA_COST_DEBUG_SETMETATABLE}, {LUA_COLIBNAME, "resume", KLUA_COST_RESUME},
};
enum { WRAPPED_COUNT = sizeof WRAPPED / sizeof WRAPPED[0] };

/* The calls that would take the statement out of its budget: changing the hook; a __gc
 * finalizer (Lua runs finalizers with hooks off); resuming a coroutine made before the
 * statement, which has no hook yet (it gets the budget's). */
static void guard(lua_State *L, klua_budget *b, wrapped kind) {
    if (kind == KLUA_COST_SETHOOK)
        luaL_error(L, "debug.sethook is not available in the console (the statement budget owns the hook)");
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
        if (lua_gethook(co) == NULL) lua_sethook(co, budget_hook, LUA_MASKCOUNT, b->spent ? 1 : HOOK_COUNT);
    }
}

/* The wrapper: upvalue 1 a userdata holding the C function it stands for (so that
 * debug.getupvalue hands out nothing callable), upvalue 2 its kind. Under LuaJIT the
 * userdata holds the function as its user value: LuaJIT's library functions are fast
 * functions, whose C pointer is no lua_CFunction to call (and some have none). */
static int wrapper(lua_State *L) {
    lua_Integer k = lua_tointeger(L, lua_upvalueindex(2));
#if KLUA_LUAJIT
    bool intact = lua_type(L, lua_upvalueindex(1)) == LUA_TUSERDATA &&
                  lua_getiuservalue(L, lua_upvalueindex(1), 1) == LUA_TFUNCTION;
    if (intact) lua_pop(L, 1);
#else
    lua_CFunction *original = lua_touserdata(L, lua_upvalueindex(1));
    bool intact = original && *original && lua_rawlen(L, lua_upvalueindex(1)) == sizeof *original;
#endif
    if (k < 0 || k >= WRAPPED_COUNT || !intact)
        return luaL_error(L, "console: a wrapped library function was tampered with");
    wrapped kind = (wrapped)k;
    klua_budget *b = current(L);
    const char *name = WRAPPED[kind].name;
    const char *lib = WRAPPED[kind].lib;
    if (b) {
        guard(L, b, kind);
        double steps, bytes;
        klua_cost(L, kind, (double)b->left, &steps, &bytes);
        char why[160];
        if (bytes > KLUA_COST_RESULT_MAX) {
            snprintf(why, sizeof why, "console: %s.%s could build %.3g bytes, more than one call may in the "
                     "console (%.0f)", lib, name, bytes, KLUA_COST_RESULT_MAX);
            return luaL_error(L, "%s", why);
        }
        double cost = steps + bytes / KLUA_COST_BYTES_PER_STEP;
        if (cost > (double)b->left) {
            snprintf(why, sizeof why, "console: %s.%s could take %.3g steps, past what is left of the "
                     "statement's instruction budget", lib, name, cost);
            return luaL_error(L, "%s", why);
        }
        b->left -= (int64_t)cost;
    }
#if KLUA_LUAJIT
    lua_getiuservalue(L, lua_upvalueindex(1), 1);
#else
    lua_pushcfunction(L, *original);
#endif
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* ---- one statement ------------------------------------------------------------------------ */

enum { ARG_FEED = 1, ARG_SESSION, ARG_LINE, ARG_LENGTH, ARG_BUDGET, SLOT_PRINT, SLOT_SAVED };

/* Swaps each library function (a C function) for a wrapper; the saved table holds, for entry
 * k of WRAPPED, the original at 2k+1 and the wrapper at 2k+2. */
static void swap_in(lua_State *L, int saved) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    int top = lua_gettop(L) + 1; /* where each library table goes */
    for (int k = 0; k < WRAPPED_COUNT; k++) {
        lua_settop(L, top - 1);
        lua_pushstring(L, WRAPPED[k].lib);
        if (lua_rawget(L, -2) != LUA_TTABLE) continue;
        lua_pushstring(L, WRAPPED[k].name);
        lua_rawget(L, -2);
        /* only a C function without upvalues (the standard ones) can be called from its pointer */
        if (!lua_iscfunction(L, -1) || lua_tocfunction(L, -1) == wrapper || lua_getupvalue(L, -1, 1)) {
            lua_settop(L, top);
            continue;
        }
        lua_pushvalue(L, -1);
        lua_rawseti(L, saved, 2 * k + 1);
#if KLUA_LUAJIT
        lua_newuserdatauv(L, 1, 1);
        lua_insert(L, -2);
        lua_setiuservalue(L, -2, 1);
#else
        lua_CFunction fn = lua_tocfunction(L, -1);
        lua_pop(L, 1);
        lua_CFunction *box = lua_newuserdatauv(L, sizeof *box, 0);
        *box = fn;
#endif
        lua_pushinteger(L, k);
        lua_pushcclosure(L, wrapper, 2);
        lua_pushvalue(L, -1);
        lua_rawseti(L, saved, 2 * k + 2);
        lua_pushstring(L, WRAPPED[k].name);
        lua_insert(L, -2);
        lua_rawset(L, -3);
    }
    lua_settop(L, top - 2);
}

/* Puts back each original whose wrapper is still in place (a statement that replaced the
 * function keeps its own). Writes existing keys only, so it cannot fail. */
static void swap_out(lua_State *L, int saved) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    for (int k = 0; k < WRAPPED_COUNT; k++) {
        if (lua_rawgeti(L, saved, 2 * k + 2) == LUA_TNIL) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushstring(L, WRAPPED[k].lib);
        if (lua_rawget(L, -3) == LUA_TTABLE) {
            lua_pushstring(L, WRAPPED[k].name);
            lua_rawget(L, -2);
            if (lua_rawequal(L, -1, -3)) {
                lua_pushstring(L, WRAPPED[k].name);
                lua_rawgeti(L, saved, 2 * k + 1);
                lua_rawset(L, -4);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
}

/* Runs feed(session, line) with the budget armed; returns the pcall status with the two
 * results (or the message) on top. */
static int run_armed(lua_State *L, klua_budget *b, int saved, const char *line, size_t n) {
    /* the budget registered before (another console's statement may be running: this one was
     * polled from it) is registered again after, or that statement would run on unbudgeted */
    lua_rawgetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY);
    void *before = lua_touserdata(L, -1);
    lua_pop(L, 1);
    b->left = b->limit;
    b->spent = false;
    b->deadline = klua_console_now() + b->statement_ms / 1000.0;
    b->active = true;
    lua_pushlightuserdata(L, b);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY); /* the key exists: no allocation */
    klua_compat_budget_jit_off(L); /* LuaJIT: the JIT off even if the game turned it on */
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    swap_in(L, saved);
    lua_pushvalue(L, ARG_FEED);
    lua_pushvalue(L, ARG_SESSION);
    lua_pushlstring(L, line, n);
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_COUNT);
    int status = lua_pcall(L, 2, 2, 0);
    lua_sethook(L, old_hook, old_mask, old_count);
    b->active = false;
    if (before) lua_pushlightuserdata(L, before);
    else lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY); /* the key exists: no allocation */
    swap_out(L, saved);
    return status;
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
    lua_createtable(L, 2 * WRAPPED_COUNT, 0); /* SLOT_SAVED */
    int status = run_armed(L, b, SLOT_SAVED, line, n);
    if (status == LUA_OK) {
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
     * and drop what was typed of a statement over several lines (under a fresh budget: the
     * session's own code may have been changed by the statement) */
    if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushliteral(L, "error (not a string)");
    }
    int message = lua_gettop(L);
    lua_pushglobaltable(L);
    lua_pushstring(L, "print");
    lua_pushvalue(L, SLOT_PRINT);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    if (run_armed(L, b, SLOT_SAVED, ":reset", 6) == LUA_OK) lua_pop(L, 2);
    else lua_pop(L, 1);
    lua_pushliteral(L, "error");
    lua_pushvalue(L, message);
    return 2;
}
