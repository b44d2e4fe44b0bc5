/* mod_sandbox.c: a mod's own Lua state: its counted allocator, the safe library it gets, and
 * its top level run under budget. Invariant: nothing in a mod's globals reaches files,
 * processes, the debug library, bytecode, finalizers or another state except through kiln. */
#include <lualib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"
#include "../../core/src/number_text.h" /* (header-only: no call into core internals) */
#include "refs.h"

static const char self_key = 's';   /* registry: light userdata of the klua_mod */
static const char loaded_key = 'l'; /* registry: modules its require loaded, by name */
static const char modtab_key = 'm'; /* registry: its `mod` table (exports live there) */
static const char view_key = 'v';   /* registry: its view of the world (mod->kw) */

static klua_mod *mod_of(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &self_key);
    klua_mod *mod = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return mod;
}

/* ---- memory ------------------------------------------------------------------------------ */

/* While mod code runs, every byte it allocates is charged to the entry's budget too: one
 * instruction can copy a string of megabytes (.., upper, format, sub), so counting only
 * instructions would leave that C work unbounded. Past the budget, the main thread's hook is
 * made to fire at the next instruction (as lua.c's signal handler does). */
static void charge_bytes(klua_mod_mem *m, size_t bytes) {
    klua_mod *mod = (klua_mod *)(void *)((char *)m - offsetof(klua_mod, mem));
    klua_world *kw = mod->kw;
    if (!kw || kw->budget_limit <= 0 || !mod->L) return;
    kw->budget_used += (int64_t)(bytes / KLUA_COST_BYTES_PER_STEP);
    if (kw->budget_used > kw->budget_limit) {
        /* the only hook a mod's state has is the budget's (it has no debug library). Inside
         * an allocation the stack may be moving: nothing here may touch it */
        lua_Hook hook = lua_gethook(mod->L);
        if (hook && (lua_gethookmask(mod->L) & LUA_MASKCOUNT)) klua_compat_sethook_raw(mod->L, hook, LUA_MASKCOUNT, 1);
    }
}

/* Counts every byte of the state. While mod code runs the limit holds; between entries,
 * kiln's own bookkeeping may pass it by up to a slack rather than fail unprotected. */
void *klua_mod_mem_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    klua_mod_mem *m = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        m->used -= old;
        if (m->used < m->floor) m->floor = m->used;
        return NULL;
    }
    if (nsize > old) {
        size_t limit = m->depth > 0 ? m->limit : m->limit + m->limit / 2 + (1 << 20);
        if (m->used - old + nsize > limit) {
            m->refused++;
            return NULL;
        }
    }
    void *p = realloc(ptr, nsize);
    if (!p) {
        m->refused++;
        return NULL;
    }
    m->used = m->used - old + nsize;
    if (m->used > m->peak) m->peak = m->used;
    if (m->used < m->floor) m->floor = m->used; /* (a block made smaller) */
    if (m->depth > 0 && nsize > old) charge_bytes(m, nsize - old);
    return p;
}

/* ---- the library it gets ------------------------------------------------------------------ */

/* math.random and math.randomseed over the mod's own kiln_random stream (kiln_persist.h),
 * seeded from the manager's seed and the mod's name, so a replay draws the same numbers. */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void seed_random(kiln_random *r, uint64_t seed, const char *name) {
    uint64_t x = seed;
    for (const char *p = name; *p; p++) x = (x ^ (unsigned char)*p) * 0x100000001b3u;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

/* math.random: inside one of the mod's systems, world:random (the system's stream, forked
 * from the world's seed, the system and the tick: the same in every run of a seed, whatever
 * the threads do); at its top level, the mod's own stream, so its rolls there do not depend
 * on which mods loaded before it. */
static int m_random(lua_State *L) {
    klua_mod *mod = mod_of(L);
    if (mod->kw && mod->kw->current && lua_gettop(L) != 1) {
        int n = lua_gettop(L);
        luaL_getmetatable(L, KLUA_WORLD);
        lua_getfield(L, -1, "__index");
        lua_getfield(L, -1, "random");
        lua_replace(L, -3);
        lua_pop(L, 1);
        klua_push_self(L, mod->kw);
        lua_rotate(L, 1, 2); /* random, world, args... */
        lua_call(L, n + 1, 1);
        return 1;
    }
    if (mod->kw && mod->kw->current) { /* math.random(m): world:random(m), and (0): all its bits */
        lua_Integer m = luaL_checkinteger(L, 1);
        if (m == 0) {
            lua_pushinteger(L, (lua_Integer)klua_random_bits(L, mod->kw, "math.random"));
            return 1;
        }
        luaL_getmetatable(L, KLUA_WORLD);
        lua_getfield(L, -1, "__index");
        lua_getfield(L, -1, "random");
        klua_push_self(L, mod->kw);
        lua_pushinteger(L, m);
        lua_call(L, 2, 1);
        return 1;
    }
    lua_Integer low, up;
    switch (lua_gettop(L)) {
    case 0:
        lua_pushnumber(L, kiln_random_double(&mod->random));
        return 1;
    case 1:
        low = 1;
        up = luaL_checkinteger(L, 1);
        if (up == 0) { /* math.random(0): all bits */
            lua_pushinteger(L, (lua_Integer)kiln_random_next(&mod->random));
            return 1;
        }
        break;
    case 2:
        low = luaL_checkinteger(L, 1);
        up = luaL_checkinteger(L, 2);
        break;
    default:
        return luaL_error(L, "wrong number of arguments");
    }
    luaL_argcheck(L, low <= up, lua_gettop(L), "interval is empty");
    lua_pushinteger(L, (lua_Integer)kiln_random_range(&mod->random, low, up));
    return 1;
}

/* world:random in a mod's view: inside its systems the world's (the system's stream); outside
 * them (its top level, its exports) the mod's own stream, as math.random, not the world's main
 * stream, whose draws are the host's (a mod's load changed the host's next world:random).
 * Upvalue 1: the method it replaces, which also checks the arguments it leaves (self, 0). */
static int w_random_mod(lua_State *L) {
    klua_mod *mod = mod_of(L);
    bool own = mod->kw && !mod->kw->current && lua_touserdata(L, 1) == (void *)mod->kw &&
               !(lua_gettop(L) == 2 && lua_tointeger(L, 2) == 0);
    if (!own) {
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_insert(L, 1);
        lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
        return lua_gettop(L);
    }
    lua_remove(L, 1);
    return m_random(L);
}

/* math.randomseed(n): reseeds the mod's own top-level stream (the world's are the host's). */
static int m_randomseed(lua_State *L) {
    klua_mod *mod = mod_of(L);
    lua_Integer n = luaL_checkinteger(L, 1);
    seed_random(&mod->random, (uint64_t)n, mod->name);
    return 0;
}

/* Under LuaJIT, recursion through the C functions below that call back into Lua stops before
 * the C stack runs out (Lua 5.4 stops it itself at 200 C calls). */
#define C_STACK_GUARD(L)                                                                                     \
    do {                                                                                                     \
        if (klua_compat_c_stack_low()) return luaL_error((L), "C stack overflow");                           \
    } while (0)

#if KLUA_LUAJIT
/* LuaJIT resumes a coroutine on the C stack of its resumer: a mod nesting coroutines (each
 * body resuming the next) ran it out. coroutine.resume and the functions coroutine.wrap
 * makes are called through guarded; upvalue 1 the function. */
static int guarded(lua_State *L) {
    C_STACK_GUARD(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int m_wrap(lua_State *L) { /* upvalue 1 coroutine.wrap */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    lua_pushcclosure(L, guarded, 1);
    return 1;
}

static void guard_coroutines(lua_State *L) {
    lua_getglobal(L, "coroutine");
    lua_getfield(L, -1, "resume");
    lua_pushcclosure(L, guarded, 1);
    lua_setfield(L, -2, "resume");
    lua_getfield(L, -1, "wrap");
    lua_pushcclosure(L, m_wrap, 1);
    lua_setfield(L, -2, "wrap");
    lua_pop(L, 1);
}
#else
/* A mod's coroutine runs its body protected (see klua_coroutine_body): a coroutine the budget
 * stopped closes its to-be-closed variables under the spent budget. */
static int m_coroutine(lua_State *L) { /* upvalue 1 coroutine.create or coroutine.wrap */
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_pushcclosure(L, klua_coroutine_body, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 1, 1);
    return 1;
}

static void guard_coroutines(lua_State *L) {
    lua_getglobal(L, "coroutine");
    static const char *const makers[] = {"create", "wrap"};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, -1, makers[i]);
        lua_pushcclosure(L, m_coroutine, 1);
        lua_setfield(L, -2, makers[i]);
    }
    lua_pop(L, 1);
}
#endif

/* A wrapped library function: upvalue 1 the original, upvalue 2 its klua_costly kind, 3 its
 * name. The worst case is charged to the mod's budget before the original runs. */
static int costly(lua_State *L) {
    C_STACK_GUARD(L);
    klua_costly kind = (klua_costly)lua_tointeger(L, lua_upvalueindex(2));
    const char *name = lua_tostring(L, lua_upvalueindex(3));
    double steps, bytes, left = klua_budget_left(L);
    klua_cost(L, kind, left < 0 ? 1e7 : left, &steps, &bytes);
    if (bytes > KLUA_COST_RESULT_MAX) { /* lua_pushfstring knows no %g: format here */
        char msg[160], num[32];
        snprintf(msg, sizeof msg, "%.40s could build %s bytes, more than one call may in a mod (%.0f)", name,
                 kl_number_text(num, sizeof num, "%.3g", bytes), (double)KLUA_COST_RESULT_MAX);
        klua_raise(L, "%s", msg); /* a limit's stop: no chunk:line: (docs/lua-api.md) */
    }
    klua_budget_charge(L, steps + bytes / KLUA_COST_BYTES_PER_STEP, name);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static void wrap(lua_State *L, const char *lib, const char *fn, klua_costly kind) {
    lua_getglobal(L, lib);
    lua_getfield(L, -1, fn);
    lua_pushinteger(L, kind);
    lua_pushfstring(L, "%s.%s", lib, fn);
    lua_pushcclosure(L, costly, 3);
    lua_setfield(L, -2, fn);
    lua_pop(L, 1);
}

/* Functions returning as many values as asked (up to the stack's million): each value costs
 * a step, charged before the call, so a loop over one call cannot push millions per
 * instruction. And functions that read a whole string without allocating (utf8.len over
 * 30 MB takes 50 ms, string.unpack's format 11 ns a byte, a string's arithmetic reads it
 * as a number), which the allocator's charge never sees: the wall clock, read every 1000
 * instructions, let a loop over one of them run 25 times past its time limit. They pay a
 * step per byte of their string arguments (COUNT_TEXT), or per 8 (COUNT_TEXT8).
 * Upvalue 1 the original, 2 its name, 3 the kind below. */
enum { COUNT_UNPACK, COUNT_RANGE, COUNT_TEXT, COUNT_TEXT8 };

static lua_Integer relative(lua_Integer pos, lua_Integer len) { /* as string.byte reads i, j */
    if (pos >= 0) return pos;
    if (-pos > len) return 0;
    return len + pos + 1;
}

static int counted(lua_State *L) {
    const char *name = lua_tostring(L, lua_upvalueindex(2));
    double n = 0;
    lua_Integer kind = lua_tointeger(L, lua_upvalueindex(3));
    if (kind == COUNT_TEXT || kind == COUNT_TEXT8) {
        for (int i = 1; i <= lua_gettop(L); i++)
            if (lua_type(L, i) == LUA_TSTRING) n += (double)lua_rawlen(L, i);
        if (kind == COUNT_TEXT8) n /= KLUA_COST_BYTES_PER_STEP;
    } else if (kind == COUNT_UNPACK) {
        lua_Integer i = luaL_optinteger(L, 2, 1);
        lua_Integer j = lua_isnoneornil(L, 3) ? luaL_len(L, 1) : luaL_checkinteger(L, 3);
        n = (double)j - (double)i + 1;
    } else { /* string.byte, utf8.codepoint: (s [, i [, j]]) */
        size_t len;
        luaL_checklstring(L, 1, &len);
        lua_Integer i = relative(luaL_optinteger(L, 2, 1), (lua_Integer)len);
        lua_Integer j = relative(luaL_optinteger(L, 3, i), (lua_Integer)len);
        if (i < 1) i = 1;
        if (j > (lua_Integer)len) j = (lua_Integer)len;
        n = (double)j - (double)i + 1;
    }
    if (n > 0) klua_budget_charge(L, n, name);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static void wrap_counted(lua_State *L, const char *lib, const char *fn, int kind) {
    if (lua_getglobal(L, lib) != LUA_TTABLE) { /* utf8, under LuaJIT */
        lua_pop(L, 1);
        return;
    }
    if (lua_getfield(L, -1, fn) != LUA_TFUNCTION) { /* string.pack, under LuaJIT */
        lua_pop(L, 2);
        return;
    }
    if (strcmp(lib, "_G") == 0) lua_pushstring(L, fn);
    else lua_pushfstring(L, "%s.%s", lib, fn);
    lua_pushinteger(L, kind);
    lua_pushcclosure(L, counted, 3);
    lua_setfield(L, -2, fn);
    lua_pop(L, 1);
}

/* setmetatable without __gc: Lua runs finalizers with hooks off, outside any budget. */
static int m_setmetatable(lua_State *L) {
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushstring(L, "__gc");
        bool gc = lua_rawget(L, 2) != LUA_TNIL;
        lua_pop(L, 1);
        if (gc) return luaL_error(L, "a mod cannot set a __gc finalizer (finalizers run outside its budget)");
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int m_collectgarbage(lua_State *L) {
    static const char *const allowed[] = {"collect", "step", "count", "isrunning", NULL};
    const char *opt = luaL_optstring(L, 1, "collect");
    /* a full collection walks the whole heap in one call: charged by the heap's size */
    klua_mod *mod = mod_of(L);
    if (strcmp(opt, "collect") == 0) klua_budget_charge(L, (double)mod->mem.used / KLUA_COST_BYTES_PER_STEP, "collectgarbage");
    if (strcmp(opt, "step") == 0) {
        lua_Integer kib = luaL_optinteger(L, 2, 0);
        double bytes = kib > 0 ? (double)kib * 1024 : 8192;
        if (bytes > (double)mod->mem.used) bytes = (double)mod->mem.used;
        klua_budget_charge(L, bytes / KLUA_COST_BYTES_PER_STEP, "collectgarbage");
    }
    for (int i = 0; allowed[i]; i++)
        if (strcmp(opt, allowed[i]) == 0) {
            lua_pushvalue(L, lua_upvalueindex(1));
            lua_insert(L, 1);
            lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
            return lua_gettop(L);
        }
    return luaL_error(L, "collectgarbage('%s') is not available to mods", opt);
}

/* xpcall(f, handler, ...): the handler is skipped once the budget is spent. The budget's
 * error is raised from inside its count hook, and Lua runs a message handler before it
 * unwinds, with hooks still off: the mod's handler would run unbudgeted, so a looping one
 * would never stop. Other errors reach the handler, which runs under the budget. */
static int m_handler(lua_State *L) {
    klua_mod *mod = mod_of(L);
    klua_world *kw = mod ? mod->kw : NULL;
    if (!kw || (kw->budget_limit > 0 && kw->budget_used > kw->budget_limit)) return 1; /* the message */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int m_xpcall(lua_State *L) {
    C_STACK_GUARD(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, m_handler, 1);
    lua_replace(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Reads every piece of a reader function given to load (at index 1) into one string, in place
 * of the function; each piece is charged as the text it is (the parser reads a comment without
 * allocating: a reader returning one long piece for good kept load in C), one step at least.
 * The reader runs here, not inside lua_load: under LuaJIT an error raised in a count hook and
 * caught by lua_load left the hook marked active, so no hook ran again in the mod's state
 * and the next endless loop held the host for good. Returns 0, or 2 with nil and the reader's
 * error pushed (load's answer for a reader that fails or returns a non-string). */
static int read_pieces(lua_State *L) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (;;) {
        lua_pushvalue(L, 1);
        if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
            lua_pushnil(L);
            lua_insert(L, -2);
            return 2;
        }
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            break;
        }
        if (!lua_isstring(L, -1)) { /* (a number is text, as the interpreter takes it) */
            lua_pushnil(L);
            lua_pushliteral(L, "reader function must return a string");
            return 2;
        }
        size_t len;
        lua_tolstring(L, -1, &len);
        if (len == 0) {
            lua_pop(L, 1);
            break;
        }
        klua_budget_charge(L, 1.0 + (double)len / KLUA_COST_BYTES_PER_STEP, "load");
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_replace(L, 1);
    return 0;
}

/* load(chunk [, name [, mode [, env]]]): text only; the environment defaults to the mod's.
 * The text is charged by its bytes: parsing a long comment allocates nothing, and a loop over
 * load of 12 MB of comment ran twice its time limit between two reads of the wall clock. */
static int m_load(lua_State *L) {
    C_STACK_GUARD(L);
    lua_settop(L, 4);
    if (!lua_isnil(L, 3)) {
        const char *mode = luaL_checkstring(L, 3);
        if (!strchr(mode, 't')) return luaL_error(L, "mods load text chunks only (mode '%s' refused)", mode);
    }
    if (lua_type(L, 1) == LUA_TSTRING) {
        klua_budget_charge(L, (double)lua_rawlen(L, 1) / KLUA_COST_BYTES_PER_STEP, "load");
    } else if (lua_type(L, 1) == LUA_TFUNCTION) {
        if (lua_isnil(L, 2)) lua_pushliteral(L, "=(load)"); /* the name load gives a reader's chunk */
        else lua_pushvalue(L, 2);
        lua_replace(L, 2);
        if (read_pieces(L)) return 2;
    } else {
        return luaL_typeerror(L, 1, "string");
    }
    /* parsed here as load would, with the clock read between pieces of the text */
    size_t n;
    const char *s = lua_tolstring(L, 1, &n);
    const char *chunkname = luaL_optstring(L, 2, s);
    if (klua_budget_load(L, s, n, chunkname, "t") != LUA_OK) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (!lua_isnil(L, 4)) { /* env: the chunk's first upvalue, as load sets it (LuaJIT: its fenv) */
        lua_pushvalue(L, 4);
#if KLUA_LUAJIT
        lua_setfenv(L, -2);
#else
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
#endif
    }
    return 1;
}

#define PRINT_STEPS 500 /* instructions one printed line costs, besides its bytes */

static int m_print(lua_State *L) {
    C_STACK_GUARD(L);
    klua_mod *mod = mod_of(L);
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    /* the buffer may live on the stack: each value is added from the top (luaL_addvalue),
     * never with a string of our own pushed above the buffer's slots */
    for (int i = 1; i <= n; i++) {
        if (i > 1) luaL_addchar(&b, '\t');
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (len > 4096) {
            lua_pushlstring(L, s, 4096);
            lua_remove(L, -2);
        }
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    size_t len;
    const char *line = lua_tolstring(L, -1, &len);
    /* each line reaches the host's log (a Lua call, a file write): priced so that one entry
     * cannot hand the host millions of them */
    klua_budget_charge(L, PRINT_STEPS + (double)len / KLUA_COST_BYTES_PER_STEP, "print");
    klua_mod_log(mod, line, len);
    return 0;
}

/* require(name): a text file name.lua (dots become folders) inside the mod's own folder,
 * run once in the mod's globals; its result is kept for later calls. */
static int m_require(lua_State *L) {
    C_STACK_GUARD(L);
    klua_mod *mod = mod_of(L);
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    lua_settop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &loaded_key);
    lua_pushvalue(L, 1);
    if (lua_rawget(L, 2) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    if (!mod->dir[0]) return luaL_error(L, "require '%s': a single-file mod has no folder to require from", name);
    bool ok = len > 0 && len <= 128 && name[0] != '.' && name[len - 1] != '.' && !strstr(name, "..");
    for (size_t i = 0; ok && i < len; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= '0' && name[i] <= '9') || name[i] == '_' || name[i] == '.' || name[i] == '-';
    if (!ok) return luaL_error(L, "require: bad module name (letters, digits, _ - and dots only)");
    char path[KLUA_MOD_PATH], resolved[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s.lua", mod->dir, name);
    for (char *p = path + strlen(mod->dir) + 1; *p; p++)
        if (*p == '.' && strcmp(p, ".lua") != 0) *p = '/';
    if (n < 0 || (size_t)n >= sizeof path || !klua_mod_inside(mod->dir, path, resolved))
        return luaL_error(L, "require '%s': no file %s.lua in the mod's folder", name, name);
    if (klua_mod_loadfile(L, resolved) != LUA_OK) return lua_error(L);
    klua_mod_watch(mod, resolved);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, 2);
    return 1;
}

/* mod.import(name): a copy of the exports of a mod this one depends on. */
static int m_import(lua_State *L) {
    klua_mod *mod = mod_of(L);
    const char *name = luaL_checkstring(L, 1);
    bool listed = false;
    for (int i = 0; i < mod->depend_count; i++) listed = listed || strcmp(mod->depends[i], name) == 0;
    if (!listed) return luaL_error(L, "mod.import: '%s' is not among the depends of mod '%s'", name, mod->name);
    klua_mod *dep = klua_mods_find(mod->mods, name);
    if (!dep || !dep->L) return luaL_error(L, "mod.import: mod '%s' is not running", name);
    klua_mod_push_exports(L, mod, dep);
    return 1;
}

void klua_mod_push_exports(lua_State *L, klua_mod *mod, klua_mod *dep) {
    (void)mod;
    lua_State *D = dep->L;
    if (!lua_checkstack(D, 4)) luaL_error(L, "mod.import: out of stack");
    lua_rawgetp(D, LUA_REGISTRYINDEX, &modtab_key);
    lua_pushstring(D, "exports"); /* interned already: the mod table has the key */
    lua_rawget(D, -2);
    /* the copy raises in L (we are in L's call): D's stack is set back first on error */
    int top = lua_gettop(D) - 2;
    lua_pushvalue(D, -1);
    lua_replace(D, top + 1);
    lua_settop(D, top + 1);
    klua_mod_copy(D, top + 1, L, mod->mods, dep, "exports");
    lua_settop(D, top);
}

/* Removes what a mod must not have and wraps what must be charged. Runs protected in L. */
static int build_globals(lua_State *L) {
    klua_mod *mod = lua_touserdata(L, 1);
    klua_mods *mods = mod->mods;
    lua_pushlightuserdata(L, mod);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &self_key);
    klua_budget_prepare(L);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &loaded_key);
#if KLUA_LUAJIT /* luaopen_base opens coroutine too; LuaJIT has no utf8 library */
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},       {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
                                    {NULL, NULL}};
#else
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},       {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
                                    {LUA_UTF8LIBNAME, luaopen_utf8}, {LUA_COLIBNAME, luaopen_coroutine},
                                    {NULL, NULL}};
#endif
    for (const luaL_Reg *lib = libs; lib->name; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
#if KLUA_LUAJIT
    klua_compat_sandbox_base(L);
#endif
    guard_coroutines(L);
    /* os: the clock and the calendar only */
    luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0);
    lua_createtable(L, 0, 3);
    static const char *const os_keep[] = {"time", "clock", "date", NULL};
    for (int i = 0; os_keep[i]; i++) {
        lua_getfield(L, -2, os_keep[i]);
        lua_setfield(L, -2, os_keep[i]);
    }
    lua_setglobal(L, LUA_OSLIBNAME);
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushnil(L);
    lua_setfield(L, -2, LUA_OSLIBNAME);
    lua_pop(L, 1);
    static const char *const drop[] = {"dofile", "loadfile", "warn", NULL};
    for (int i = 0; drop[i]; i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
    lua_getglobal(L, LUA_STRLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    /* the string metatable is protected like kiln's */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_pushliteral(L, "string");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);
    static const struct {
        const char *lib, *fn;
        klua_costly kind;
    } wrapped[] = {
        {"string", "rep", KLUA_COST_REP},      {"string", "find", KLUA_COST_FIND},
        {"string", "match", KLUA_COST_MATCH},  {"string", "gmatch", KLUA_COST_GMATCH},
        {"string", "gsub", KLUA_COST_GSUB},    {"table", "concat", KLUA_COST_CONCAT},
        {"table", "sort", KLUA_COST_SORT},     {"table", "move", KLUA_COST_MOVE},
        {"table", "insert", KLUA_COST_INSERT}, {"table", "remove", KLUA_COST_REMOVE},
    };
    for (size_t i = 0; i < sizeof wrapped / sizeof wrapped[0]; i++) wrap(L, wrapped[i].lib, wrapped[i].fn, wrapped[i].kind);
    wrap_counted(L, "table", "unpack", COUNT_UNPACK);
    wrap_counted(L, "string", "byte", COUNT_RANGE);
    wrap_counted(L, "utf8", "codepoint", COUNT_RANGE);
    static const struct {
        const char *lib, *fn;
        int kind;
    } texts[] = {{"utf8", "len", COUNT_TEXT},        {"utf8", "offset", COUNT_TEXT},
                 {"string", "pack", COUNT_TEXT},     {"string", "unpack", COUNT_TEXT},
                 {"string", "packsize", COUNT_TEXT}, {"_G", "tonumber", COUNT_TEXT8},
                 {"math", "tointeger", COUNT_TEXT8}};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) wrap_counted(L, texts[i].lib, texts[i].fn, texts[i].kind);
    /* "1e7" + 0: the string metatable's arithmetic reads its operands as numbers */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    static const char *const arith[] = {"__add", "__sub", "__mul", "__mod", "__pow", "__div", "__idiv", "__unm", NULL};
    for (int i = 0; arith[i]; i++) {
        if (lua_getfield(L, -1, arith[i]) != LUA_TFUNCTION) { /* LuaJIT converts in its VM */
            lua_pop(L, 1);
            continue;
        }
        lua_pushstring(L, arith[i]);
        lua_pushinteger(L, COUNT_TEXT8);
        lua_pushcclosure(L, counted, 3);
        lua_setfield(L, -2, arith[i]);
    }
    lua_pop(L, 2);
    static const struct {
        const char *name;
        lua_CFunction fn;
    } replaced[] = {{"setmetatable", m_setmetatable}, {"collectgarbage", m_collectgarbage}, {"load", m_load},
                  {"xpcall", m_xpcall}};
    for (size_t i = 0; i < sizeof replaced / sizeof replaced[0]; i++) {
        lua_getglobal(L, replaced[i].name);
        lua_pushcclosure(L, replaced[i].fn, 1);
        lua_setglobal(L, replaced[i].name);
    }
    lua_register(L, "print", m_print);
    lua_register(L, "require", m_require);
    lua_getglobal(L, LUA_MATHLIBNAME);
    lua_pushcfunction(L, m_random);
    lua_setfield(L, -2, "random");
    lua_pushcfunction(L, m_randomseed);
    lua_setfield(L, -2, "randomseed");
    lua_pop(L, 1);
    seed_random(&mod->random, mods->seed, mod->name);
    /* kiln: what a mod may use of the module (no worlds of its own, no managers) */
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    luaL_getmetatable(L, KLUA_WORLD);
    lua_getfield(L, -1, "__index");
    lua_getfield(L, -1, "random");
    lua_pushcclosure(L, w_random_mod, 1);
    lua_setfield(L, -2, "random");
    lua_pop(L, 2);
    klua_commands_link(L, mods->host);
    lua_createtable(L, 0, 2);
    lua_getfield(L, -2, "commands");
    lua_setfield(L, -2, "commands");
    lua_getfield(L, -2, "version");
    lua_setfield(L, -2, "version");
    lua_setglobal(L, "kiln");
    lua_pop(L, 1);
    klua_new_world_view(L, mods->kw, NULL, NULL, NULL); /* hooks set by the manager */
    mod->kw = lua_touserdata(L, -1);
    /* anchored for the state's life: the mod may drop its global, and kiln keeps mod->kw */
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &view_key);
    lua_setglobal(L, "world");
    /* mod: its name, version, exports and import */
    lua_createtable(L, 0, 4);
    lua_pushstring(L, mod->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, mod->version);
    lua_setfield(L, -2, "version");
    lua_newtable(L);
    lua_setfield(L, -2, "exports");
    lua_pushcfunction(L, m_import);
    lua_setfield(L, -2, "import");
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &modtab_key);
    lua_setglobal(L, "mod");
    /* what the host grants: copies of its values, proxies of its functions */
    if (mods->allow_ref != LUA_NOREF) {
        lua_State *H = mods->host;
        if (!lua_checkstack(H, 4)) return luaL_error(L, "out of stack");
        klua_getref(H, LUA_REGISTRYINDEX, mods->allow_ref);
        int t = lua_gettop(H);
        lua_pushglobaltable(L);
        lua_pushnil(H);
        while (lua_next(H, t)) {
            klua_mod_copy(H, -2, L, mods, NULL, "allow"); /* the name */
            klua_mod_copy(H, -1, L, mods, NULL, "allow"); /* the value */
            lua_rawset(L, -3);
            lua_pop(H, 1);
        }
        lua_pop(L, 1);
        lua_settop(H, t - 1);
    }
    return 0;
}

lua_State *klua_mod_state(klua_mod *mod) {
    mod->mem.limit = mod->mods->memory;
    /* kiln made this state, so its threads' extra space is kiln's: budget.c keeps the armed
     * world there while an each-system's rows run */
    lua_State *L = lua_newstate(klua_mod_mem_alloc, &mod->mem);
    if (!L) {
#if KLUA_LUAJIT /* a LuaJIT built without GC64 refuses custom allocators on 64-bit targets */
        snprintf(mod->error, sizeof mod->error, "cannot make its Lua state: out of memory, or this LuaJIT "
                 "refuses custom allocators (mods need a 64-bit LuaJIT built with GC64)");
#else
        snprintf(mod->error, sizeof mod->error, "out of memory making its Lua state");
#endif
        return NULL;
    }
    /* generational, as the stock interpreter runs its state: a mod's per-frame garbage dies
     * young, and its long-lived tables are not traversed again at every cycle */
    lua_gc(L, LUA_GCGEN, 0, 0);
#if KLUA_LUAJIT
    /* compiled traces never call the count hook: a mod's budget needs the interpreter */
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
#endif
    lua_pushlightuserdata(L, mod);
    if (klua_pcall_c(L, build_globals, 1, 0, 0) != LUA_OK) {
        snprintf(mod->error, sizeof mod->error, "cannot make its Lua state: %s",
                 lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_close(L);
        return NULL;
    }
    /* the module's load leaves its parsing's garbage, which LuaJIT's collector keeps until
     * the heap doubles: collected now, a mod starts from kiln's live size (145 KB under
     * LuaJIT) rather than from 230 KB of a 256 KiB limit, where each KB the Lua layer grew
     * was taken from the mod's room */
    lua_gc(L, LUA_GCCOLLECT, 0);
    return L;
}

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

bool klua_mod_run_file(klua_mod *mod, const char *path) {
    lua_State *L = mod->L;
    lua_settop(L, 0);
    lua_pushcfunction(L, traceback);
    /* armed for the parse too: it runs no hook, only the clock between pieces bounds it */
    klua_armed saved;
    char what[KILN_MAX_NAME + 40];
    snprintf(what, sizeof what, "the top level of mod '%s'", mod->name);
    klua_budget_arm(L, mod->kw, mod->mods->instructions, what, &saved);
    mod->mem.refused = 0;
    int status = klua_mod_loadfile(L, path);
    if (status == LUA_OK) status = lua_pcall(L, 0, 0, 1);
    klua_budget_disarm(L, mod->kw, &saved);
    bool ok = status == LUA_OK;
    if (!ok) {
        const char *msg = lua_tostring(L, -1);
        if (!msg) msg = "(error object is not a string)";
        const char *tb = strstr(msg, "\nstack traceback:");
        int len = tb ? (int)(tb - msg) : (int)strlen(msg);
        snprintf(mod->error, sizeof mod->error, "%.*s", len, msg);
    }
    lua_settop(L, 0);
    return ok;
}

void klua_mod_log(klua_mod *mod, const char *line, size_t len) {
    char *slot = mod->log[mod->log_next];
    if (len >= KLUA_MOD_LOG_LINE) {
        memcpy(slot, line, KLUA_MOD_LOG_LINE - 4);
        memcpy(slot + KLUA_MOD_LOG_LINE - 4, "...", 4);
    } else {
        memcpy(slot, line, len);
        slot[len] = '\0';
    }
    mod->log_next = (mod->log_next + 1) % KLUA_MOD_LOG_LINES;
    mod->log_total++;
    klua_mods *mods = mod->mods;
    if (mods->log_fn) mods->log_fn(mods->log_user, mod->name, slot);
}
