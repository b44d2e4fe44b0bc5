/* console_budget.c: the budget one console statement runs under: counted instructions, a
 * wall clock, and C functions charged their worst case before they run. Invariant: once a
 * statement's budget is spent, every instruction it runs raises until the console has it back. */
#include <lualib.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "console.h"

enum {
    HOOK_COUNT = 100,             /* instructions between two checks of the budget */
    BYTES_PER_STEP = 8,           /* bytes a C loop copies in the time of one instruction */
};
#define RESULT_MAX ((double)(64 << 20)) /* bytes one wrapped call may build */

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

typedef enum wrapped {
    W_REP, W_FIND, W_MATCH, W_GMATCH, W_GSUB, W_CONCAT, W_SORT, W_MOVE, W_INSERT, W_REMOVE,
    W_SETHOOK, W_SETMETATABLE, W_DEBUG_SETMETATABLE, W_RESUME
} wrapped;

static const struct {
    const char *lib, *name;
    wrapped kind;
} WRAPPED[] = {
    {LUA_STRLIBNAME, "rep", W_REP},       {LUA_STRLIBNAME, "find", W_FIND},
    {LUA_STRLIBNAME, "match", W_MATCH},   {LUA_STRLIBNAME, "gmatch", W_GMATCH},
    {LUA_STRLIBNAME, "gsub", W_GSUB},     {LUA_TABLIBNAME, "concat", W_CONCAT},
    {LUA_TABLIBNAME, "sort", W_SORT},     {LUA_TABLIBNAME, "move", W_MOVE},
    {LUA_TABLIBNAME, "insert", W_INSERT}, {LUA_TABLIBNAME, "remove", W_REMOVE},
    {LUA_DBLIBNAME, "sethook", W_SETHOOK},   {LUA_GNAME, "setmetatable", W_SETMETATABLE},
    {LUA_DBLIBNAME, "setmetatable", W_DEBUG_SETMETATABLE}, {LUA_COLIBNAME, "resume", W_RESUME},
};
enum { WRAPPED_COUNT = sizeof WRAPPED / sizeof WRAPPED[0] };

/* ---- the worst case of a Lua pattern ------------------------------------------------------
 * The matcher tries, for a quantified item (`*`, `+`, `-`), every length of its run, and for
 * each the rest of the pattern. When the item after it cannot match a character the run
 * took (their classes are disjoint), all but one of those tries fail at once: the run costs
 * its length, added. When they overlap, each length can go on matching: the run multiplies.
 * A `?` doubles, `%b` and back references are charged as overlapping runs, and an
 * unanchored search starts at every position. The estimate is an upper bound, reached by
 * patterns like "a*a*a*b" on "aaaa...". */

typedef struct charset {
    uint64_t bits[4];
} charset;

static void set_add(charset *cs, unsigned char ch) { cs->bits[ch >> 6] |= (uint64_t)1 << (ch & 63); }

static bool class_has(char cls, int ch) {
    switch (cls | 0x20) {
    case 'a': return isalpha(ch);
    case 'c': return iscntrl(ch);
    case 'd': return isdigit(ch);
    case 'g': return isgraph(ch);
    case 'l': return islower(ch);
    case 'p': return ispunct(ch);
    case 's': return isspace(ch);
    case 'u': return isupper(ch);
    case 'w': return isalnum(ch);
    case 'x': return isxdigit(ch);
    default: return ch == (unsigned char)cls;
    }
}

/* Adds the escape %cls to cs (an upper-case class letter is the complement). */
static void set_class(charset *cs, char cls) {
    bool letter = strchr("acdglpsuwxACDGLPSUWX", cls) && cls;
    for (int ch = 0; ch < 256; ch++) {
        bool in = class_has(cls, ch);
        if (letter && isupper((unsigned char)cls)) in = !in;
        if (in) set_add(cs, (unsigned char)ch);
    }
}

/* Reads one single-character item at p[*i] into cs; false for what is not one (%b, %f, a
 * back reference, a capture bracket). */
static bool read_item(const char *p, size_t m, size_t *i, charset *cs) {
    memset(cs, 0, sizeof *cs);
    char ch = p[*i];
    if (ch == '.') {
        memset(cs, 0xff, sizeof *cs);
        (*i)++;
    } else if (ch == '%' && *i + 1 < m) {
        char e = p[*i + 1];
        if (e == 'b' || e == 'f' || (e >= '0' && e <= '9')) return false;
        set_class(cs, e);
        *i += 2;
    } else if (ch == '[') {
        size_t k = *i + 1;
        bool negate = k < m && p[k] == '^';
        if (negate) k++;
        do {
            if (k >= m) break;
            if (p[k] == '%' && k + 1 < m) {
                set_class(cs, p[k + 1]);
                k += 2;
            } else if (k + 2 < m && p[k + 1] == '-' && p[k + 2] != ']') {
                for (int c = (unsigned char)p[k]; c <= (unsigned char)p[k + 2]; c++) set_add(cs, (unsigned char)c);
                k += 3;
            } else {
                set_add(cs, (unsigned char)p[k++]);
            }
        } while (k < m && p[k] != ']');
        if (negate)
            for (int w = 0; w < 4; w++) cs->bits[w] = ~cs->bits[w];
        *i = k + 1;
    } else if (ch == '(' || ch == ')') {
        return false;
    } else {
        set_add(cs, (unsigned char)ch);
        (*i)++;
    }
    return true;
}

static bool overlap(const charset *a, const charset *b) {
    for (int w = 0; w < 4; w++)
        if (a->bits[w] & b->bits[w]) return true;
    return false;
}

enum { ITEMS_MAX = 64 };

typedef struct item {
    charset cs;
    char quant;  /* 0, '*', '+', '-', '?' */
    bool opaque; /* %b, %f, a back reference: charged as an overlapping run */
} item;

static double pattern_cost(const char *p, size_t m, const char *subject, size_t n, bool may_anchor,
                           bool plain) {
    double starts = (double)n + 1, run = (double)n + 1;
    if (plain) return starts * ((double)m + 1);
    size_t i = 0;
    if (may_anchor && m > 0 && p[0] == '^') {
        starts = 1;
        i = 1;
    }
    item items[ITEMS_MAX];
    int count = 0;
    double ways = 1, added = 1;
    while (i < m) {
        if (p[i] == '(' || p[i] == ')') {
            i++;
            continue;
        }
        if (p[i] == '$' && i + 1 == m) break;
        item it = {0};
        size_t at = i;
        if (!read_item(p, m, &i, &it.cs)) {
            i = at + 2 + (p[at + 1] == 'b' ? 2 : 0);
            if (p[at + 1] == 'f') {
                /* a frontier is a zero-width test: no run of its own */
                if (i < m) read_item(p, m, &i, &it.cs);
                continue;
            }
            it.opaque = true;
        }
        if (i < m && strchr("*+-?", p[i])) it.quant = p[i++];
        if (count == ITEMS_MAX) {
            ways *= run; /* past what is looked at closely: every further item multiplies */
            continue;
        }
        items[count++] = it;
    }
    if (starts > 1 && count > 0 && !items[0].opaque && (items[0].quant == 0 || items[0].quant == '+')) {
        /* a search gets past its first item only where that item matches: count those */
        double hits = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned char ch = (unsigned char)subject[k];
            if (items[0].cs.bits[ch >> 6] >> (ch & 63) & 1) hits++;
        }
        starts = hits;
    }
    for (int k = 0; k < count; k++) {
        const item *it = &items[k];
        if (it->quant == '?') {
            ways *= 2;
        } else if (it->opaque) {
            ways *= run;
        } else if (it->quant) {
            bool overlapping = k + 1 < count && (items[k + 1].opaque || overlap(&it->cs, &items[k + 1].cs));
            if (overlapping) ways *= run;
            else added += run;
        }
        if (ways > 1e30) break;
    }
    return (double)n + starts * ways * (added + (double)m + 1);
}

static bool has_specials(const char *p, size_t m) {
    for (size_t i = 0; i < m; i++)
        if (strchr("^$*+?.([%-", p[i])) return true;
    return false;
}

/* Length of what #t gives without running a metamethod (0 for a non-table). */
static double raw_len(lua_State *L, int idx) {
    return lua_type(L, idx) == LUA_TTABLE ? (double)lua_rawlen(L, idx) : 0;
}

static double int_arg(lua_State *L, int idx, double dflt) {
    if (lua_type(L, idx) != LUA_TNUMBER) return dflt;
    return lua_tonumber(L, idx);
}

/* Bytes table.concat(t, sep, i, j) would build, counting raw entries (a value behind a
 * metamethod is charged when its Lua code runs). */
static double concat_bytes(lua_State *L, klua_budget *b) {
    if (lua_type(L, 1) != LUA_TTABLE) return 0;
    double i = int_arg(L, 3, 1), j = int_arg(L, 4, raw_len(L, 1));
    if (!(j >= i) || i < -9e15 || j > 9e15) return 0; /* the original refuses what is no integer */
    double count = j - i + 1;
    if (count > (double)b->left) return count * BYTES_PER_STEP; /* refused before a loop */
    size_t sep = lua_type(L, 2) == LUA_TSTRING ? lua_rawlen(L, 2) : 0;
    double bytes = count * (double)sep;
    for (lua_Integer k = (lua_Integer)i; k <= (lua_Integer)j; k++) {
        if (lua_rawgeti(L, 1, k) == LUA_TSTRING) bytes += (double)lua_rawlen(L, -1);
        else bytes += 24; /* a number's text */
        lua_pop(L, 1);
        if (bytes > RESULT_MAX) break;
    }
    return bytes;
}

/* Steps and bytes the call at hand (arguments from 1) may take at worst. */
static void worst_case(lua_State *L, klua_budget *b, wrapped kind, double *steps, double *bytes) {
    *steps = 0;
    *bytes = 0;
    size_t n = 0, m = 0;
    const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &n) : NULL;
    const char *p = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &m) : NULL;
    switch (kind) {
    case W_REP: {
        double count = int_arg(L, 2, 0);
        size_t sep = lua_type(L, 3) == LUA_TSTRING ? lua_rawlen(L, 3) : 0;
        if (s && count > 0) *bytes = count * ((double)n + (double)sep);
        break;
    }
    case W_FIND:
        if (s && p) *steps = pattern_cost(p, m, s, n, true, lua_toboolean(L, 4) || !has_specials(p, m));
        break;
    case W_MATCH:
        if (s && p) *steps = pattern_cost(p, m, s, n, true, false);
        break;
    case W_GMATCH:
        if (s && p) *steps = pattern_cost(p, m, s, n, false, false);
        break;
    case W_GSUB:
        if (s && p) {
            *steps = pattern_cost(p, m, s, n, true, false);
            if (lua_type(L, 3) == LUA_TSTRING) {
                size_t r;
                const char *repl = lua_tolstring(L, 3, &r);
                double refs = 0;
                for (size_t i = 0; i < r; i++)
                    if (repl[i] == '%') refs++;
                *bytes = (double)n + ((double)n + 1) * ((double)r + refs * (double)n);
            }
        }
        break;
    case W_CONCAT:
        *bytes = concat_bytes(L, b);
        if (lua_type(L, 1) == LUA_TTABLE) {
            double i = int_arg(L, 3, 1), j = int_arg(L, 4, raw_len(L, 1));
            if (j >= i) *steps = j - i + 1; /* elements visited */
        }
        break;
    case W_SORT: {
        double len = raw_len(L, 1);
        *steps = len * (log2(len + 1) + 1) * 4;
        break;
    }
    case W_MOVE: {
        double f = int_arg(L, 2, 0), e = int_arg(L, 3, 0);
        if (e >= f) *steps = e - f + 1;
        break;
    }
    case W_INSERT:
    case W_REMOVE:
        *steps = raw_len(L, 1) + 1;
        break;
    default:
        break;
    }
}

/* The calls that would take the statement out of its budget: changing the hook; a __gc
 * finalizer (Lua runs finalizers with hooks off); resuming a coroutine made before the
 * statement, which has no hook yet (it gets the budget's). */
static void guard(lua_State *L, klua_budget *b, wrapped kind) {
    if (kind == W_SETHOOK)
        luaL_error(L, "debug.sethook is not available in the console (the statement budget owns the hook)");
    if ((kind == W_SETMETATABLE || kind == W_DEBUG_SETMETATABLE) && lua_type(L, 2) == LUA_TTABLE) {
        lua_pushstring(L, "__gc");
        bool gc = lua_rawget(L, 2) != LUA_TNIL;
        lua_pop(L, 1);
        if (gc)
            luaL_error(L, "console: a statement cannot set a __gc finalizer (Lua runs finalizers outside "
                          "the statement budget)");
    }
    if (kind == W_RESUME && lua_type(L, 1) == LUA_TTHREAD) {
        lua_State *co = lua_tothread(L, 1);
        if (lua_gethook(co) == NULL) lua_sethook(co, budget_hook, LUA_MASKCOUNT, b->spent ? 1 : HOOK_COUNT);
    }
}

/* The wrapper: upvalue 1 a userdata holding the C function it stands for (so that
 * debug.getupvalue hands out nothing callable), upvalue 2 its kind. */
static int wrapper(lua_State *L) {
    lua_Integer k = lua_tointeger(L, lua_upvalueindex(2));
    lua_CFunction *original = lua_touserdata(L, lua_upvalueindex(1));
    if (k < 0 || k >= WRAPPED_COUNT || !original || lua_rawlen(L, lua_upvalueindex(1)) != sizeof *original)
        return luaL_error(L, "console: a wrapped library function was tampered with");
    wrapped kind = (wrapped)k;
    klua_budget *b = current(L);
    const char *name = WRAPPED[kind].name;
    const char *lib = WRAPPED[kind].lib;
    if (b) {
        guard(L, b, kind);
        double steps, bytes;
        worst_case(L, b, kind, &steps, &bytes);
        char why[160];
        if (bytes > RESULT_MAX) {
            snprintf(why, sizeof why, "console: %s.%s could build %.3g bytes, more than one call may in the "
                     "console (%.0f)", lib, name, bytes, RESULT_MAX);
            return luaL_error(L, "%s", why);
        }
        double cost = steps + bytes / BYTES_PER_STEP;
        if (cost > (double)b->left) {
            snprintf(why, sizeof why, "console: %s.%s could take %.3g steps, past what is left of the "
                     "statement's instruction budget", lib, name, cost);
            return luaL_error(L, "%s", why);
        }
        b->left -= (int64_t)cost;
    }
    lua_pushcfunction(L, *original);
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
        lua_CFunction fn = lua_tocfunction(L, -1);
        lua_pop(L, 1);
        lua_CFunction *box = lua_newuserdatauv(L, sizeof *box, 0);
        *box = fn;
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
    b->left = b->limit;
    b->spent = false;
    b->deadline = klua_console_now() + b->statement_ms / 1000.0;
    b->active = true;
    lua_pushlightuserdata(L, b);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BUDGET_KEY); /* the key exists: no allocation */
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
