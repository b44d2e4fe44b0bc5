/* compat.c: the Lua 5.4 functions compat.h promises, written over LuaJIT's API. Built in
 * both builds; under Lua 5.4 it holds nothing. User values live in a userdata's fenv table. */
#define _GNU_SOURCE /* pthread_getattr_np */
#include "klua.h"
#include "../../core/src/number_text.h" /* (header-only: no call into core internals) */

#if KLUA_LUAJIT

#include <lualib.h>
#include <stdio.h>
#include <string.h>

/* ---- integers ------------------------------------------------------------------------------ */

lua_Integer klua_compat_checkinteger(lua_State *L, int arg) {
    int ok = 0;
    lua_Integer v = klua_compat_tointegerx(L, arg, &ok);
    if (!ok) {
        if (lua_type(L, arg) == LUA_TNUMBER || lua_type(L, arg) == LUA_TSTRING) {
            int isnum = 0;
            lua_tonumberx(L, arg, &isnum);
            if (isnum) luaL_argerror(L, arg, "number has no integer representation");
        }
        luaL_typeerror(L, arg, "number");
    }
    return v;
}

lua_Integer klua_compat_optinteger(lua_State *L, int arg, lua_Integer def) {
    return lua_isnoneornil(L, arg) ? def : klua_compat_checkinteger(L, arg);
}

/* ---- long strings ------------------------------------------------------------------------- */

/* The registry slot klua_compat_pushlstring's protected push hands its string back through:
 * one for the whole binding (it is cleared before the push returns). */
char klua_compat_push_slot;

/* ---- the extra space ---------------------------------------------------------------------- */

static const char extraspace_key = 0;

void *klua_compat_extraspace(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &extraspace_key);
    void *p = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (p) return p;
    p = lua_newuserdata(L, sizeof(void *));
    memset(p, 0, sizeof(void *));
    lua_rawsetp(L, LUA_REGISTRYINDEX, &extraspace_key);
    return p;
}

/* ---- C functions ------------------------------------------------------------------------- */

void klua_compat_pushcfunction(lua_State *L, lua_CFunction fn) {
    void *key;
    _Static_assert(sizeof key == sizeof fn, "function pointers fit a light userdata");
    memcpy(&key, &fn, sizeof key);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TFUNCTION) return;
    lua_pop(L, 1);
    lua_pushcclosure(L, fn, 0);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* Run by lua_cpcall, which makes its own C function under protection: makes fn's closure and
 * its registry entry there, so that a memory error is returned, not raised. */
static int make_cfunction(lua_State *L) {
    lua_CFunction fn;
    memcpy(&fn, lua_touserdata(L, 1), sizeof fn);
    klua_compat_pushcfunction(L, fn);
    return 0;
}

bool klua_push_c(lua_State *L, lua_CFunction fn) {
    void *key;
    memcpy(&key, &fn, sizeof key);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TFUNCTION) return true;
    lua_pop(L, 1);
    if (lua_cpcall(L, make_cfunction, &fn) != 0) {
        lua_pop(L, 1);
        return false;
    }
    lua_rawgetp(L, LUA_REGISTRYINDEX, key);
    return true;
}

int klua_pcall_c(lua_State *L, lua_CFunction fn, int nargs, int nresults, int msgh) {
    void *key;
    memcpy(&key, &fn, sizeof key);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        int status = lua_cpcall(L, make_cfunction, &fn);
        if (status != 0) { /* its error (the memory error's message) takes the values' place */
            lua_insert(L, -(nargs + 1));
            lua_pop(L, nargs);
            return status;
        }
        lua_rawgetp(L, LUA_REGISTRYINDEX, key);
    }
    lua_insert(L, -(nargs + 1));
    return lua_pcall(L, nargs, nresults, msgh);
}

/* ---- user values ------------------------------------------------------------------------- */

void *lua_newuserdatauv(lua_State *L, size_t size, int nuvalue) {
    void *p = lua_newuserdata(L, size);
    if (nuvalue > 0) {
        lua_createtable(L, nuvalue, 0);
        lua_setfenv(L, -2);
    }
    return p;
}

/* A userdata made with no user values has the globals as its environment: it reads as nil. */
static int own_env(lua_State *L, int idx) {
    lua_getfenv(L, idx);
    if (lua_istable(L, -1) && !lua_rawequal(L, -1, LUA_GLOBALSINDEX)) return 1;
    lua_pop(L, 1);
    return 0;
}

int lua_getiuservalue(lua_State *L, int idx, int n) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TUSERDATA || !own_env(L, idx)) {
        lua_pushnil(L);
        return LUA_TNONE;
    }
    lua_rawgeti(L, -1, n);
    lua_remove(L, -2);
    return lua_type(L, -1);
}

int lua_setiuservalue(lua_State *L, int idx, int n) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TUSERDATA || !own_env(L, idx)) {
        lua_pop(L, 1);
        return 0;
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, n);
    lua_pop(L, 1);
    return 1;
}

/* ---- stack and auxiliary functions --------------------------------------------------------- */

void lua_rotate(lua_State *L, int idx, int n) {
    idx = lua_absindex(L, idx);
    int span = lua_gettop(L) - idx + 1;
    if (span <= 0) return;
    n %= span;
    if (n < 0) n += span;
    for (int i = 0; i < n; i++) lua_insert(L, idx); /* the top element moves down to idx */
}

void luaL_requiref(lua_State *L, const char *modname, lua_CFunction openf, int glb) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, modname);
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        lua_pushcfunction(L, openf);
        lua_pushstring(L, modname);
        lua_call(L, 1, 1); /* LuaJIT's luaopen_base returns _G and coroutine: keep the first */
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, modname);
    }
    lua_remove(L, -2);
    if (glb) {
        lua_pushvalue(L, -1);
        lua_setglobal(L, modname);
    }
}

int luaL_getsubtable(lua_State *L, int idx, const char *fname) {
    idx = lua_absindex(L, idx);
    if (lua_getfield(L, idx, fname) == LUA_TTABLE) return 1;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, idx, fname);
    return 0;
}

const char *luaL_tolstring(lua_State *L, int idx, size_t *len) {
    idx = lua_absindex(L, idx);
    if (luaL_callmeta(L, idx, "__tostring")) {
        if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
    } else {
        switch (lua_type(L, idx)) {
        case LUA_TNUMBER:
        case LUA_TSTRING: lua_pushvalue(L, idx); lua_tolstring(L, -1, NULL); break;
        case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false"); break;
        case LUA_TNIL: lua_pushliteral(L, "nil"); break;
        default: {
            int named = luaL_getmetafield(L, idx, "__name") == LUA_TSTRING;
            const char *kind = named ? lua_tostring(L, -1) : luaL_typename(L, idx);
            lua_pushfstring(L, "%s: %p", kind, lua_topointer(L, idx));
            if (named) lua_remove(L, -2);
            break;
        }
        }
    }
    return lua_tolstring(L, -1, len);
}

int luaL_typeerror(lua_State *L, int arg, const char *tname) {
    const char *got;
    if (luaL_getmetafield(L, arg, "__name") == LUA_TSTRING) got = lua_tostring(L, -1);
    else if (lua_type(L, arg) == LUA_TLIGHTUSERDATA) got = "light userdata";
    else got = luaL_typename(L, arg);
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s expected, got %s", tname, got));
}

#undef luaL_newmetatable
int klua_compat_newmetatable(lua_State *L, const char *tname) {
    if (!luaL_newmetatable(L, tname)) return 0;
    lua_pushstring(L, tname);
    lua_setfield(L, -2, "__name"); /* as 5.4 does: type errors name the class */
    return 1;
}

/* ---- messages ------------------------------------------------------------------------------ */

/* Pushes the UTF-8 bytes of code point x (as 5.4's %U does, up to 0x7FFFFFFF). */
static void push_utf8(lua_State *L, unsigned long x) {
    char buf[8];
    int n = 0;
    if (x < 0x80) buf[n++] = (char)x;
    else {
        char tmp[8];
        unsigned limit = 0x3f; /* the largest value the first byte can still hold */
        int k = 0;
        do {
            tmp[k++] = (char)(0x80 | (x & 0x3f));
            x >>= 6;
            limit >>= 1;
        } while (x > limit);
        buf[n++] = (char)((~limit << 1) | x);
        while (k) buf[n++] = tmp[--k];
    }
    lua_pushlstring(L, buf, (size_t)n);
}

const char *klua_compat_pushvfstring(lua_State *L, const char *fmt, va_list ap) {
    int pieces = 0;
    const char *e;
    while ((e = strchr(fmt, '%')) != NULL) {
        lua_pushlstring(L, fmt, (size_t)(e - fmt));
        char buf[64];
        switch (e[1]) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            lua_pushstring(L, s ? s : "(null)");
            break;
        }
        case 'c': buf[0] = (char)va_arg(ap, int); lua_pushlstring(L, buf, 1); break;
        case 'd': snprintf(buf, sizeof buf, "%d", va_arg(ap, int)); lua_pushstring(L, buf); break;
        case 'I':
            snprintf(buf, sizeof buf, "%lld", (long long)va_arg(ap, lua_Integer));
            lua_pushstring(L, buf);
            break;
        case 'f': {
            lua_Number n = va_arg(ap, lua_Number);
            if (n == floor(n) && fabs(n) < 1e15) kl_number_text(buf, sizeof buf, "%.1f", n); /* 5.4: 1.0 */
            else kl_number_text(buf, sizeof buf, "%.14g", n);
            lua_pushstring(L, buf);
            break;
        }
        case 'p': snprintf(buf, sizeof buf, "%p", va_arg(ap, void *)); lua_pushstring(L, buf); break;
        case 'U': push_utf8(L, (unsigned long)va_arg(ap, long)); break;
        case '%': lua_pushliteral(L, "%"); break;
        default: return luaL_error(L, "invalid conversion '%%%c' to 'lua_pushfstring'", e[1]), NULL;
        }
        pieces += 2;
        fmt = e + 2;
        if (pieces >= LUA_MINSTACK - 4) { /* stay within the stack a C function is given */
            lua_concat(L, pieces);
            pieces = 1;
        }
    }
    lua_pushstring(L, fmt);
    lua_concat(L, pieces + 1);
    return lua_tostring(L, -1);
}

const char *klua_compat_pushfstring(lua_State *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *s = klua_compat_pushvfstring(L, fmt, ap);
    va_end(ap);
    return s;
}

int klua_compat_error(lua_State *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    luaL_where(L, 1);
    klua_compat_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

/* ---- the collector ------------------------------------------------------------------------- */

#undef lua_gc
int klua_compat_gc(lua_State *L, int what, ...) {
    va_list ap;
    va_start(ap, what);
    int data = what == LUA_GCSTEP ? va_arg(ap, int) : 0;
    va_end(ap);
    switch (what) {
    case LUA_GCGEN:
    case LUA_GCINC: return LUA_GCINC; /* LuaJIT's collector is incremental only */
    default: return lua_gc(L, what, data);
    }
}

/* ---- the main thread ---------------------------------------------------------------------- */

/* kiln reads the thread under a light-userdata key: LuaJIT loses integer keys of a table
 * whose growth is refused midway (refs.h), and the slot LUA_RIDX_MAINTHREAD (for hosts that
 * read it through compat.h) is one. */
static const char main_key = 0;

void klua_compat_remember_main(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &main_key) != LUA_TTHREAD) {
        lua_pushthread(L);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &main_key);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    int known = lua_type(L, -1) == LUA_TTHREAD;
    lua_pop(L, 2);
    if (known) return;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &main_key);
    lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
}

lua_State *klua_compat_main_thread(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &main_key);
    lua_State *main = lua_tothread(L, -1);
    lua_pop(L, 1);
    return main;
}

/* ---- count hooks -------------------------------------------------------------------------- */

static const char jit_off_key = 0;    /* registry: true once the JIT was turned off for budgets */
static const char jit_status_key = 0; /* registry: jit.status as kiln's load found it, or false */

/* Drops every compiled trace (they call no hooks) and turns the JIT compiler off. */
static void jit_flush_off(lua_State *L) {
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
}

static int revive_raise(lua_State *L);

void klua_compat_remember_jit(lua_State *L) {
    lua_pushlightuserdata(L, (void *)&jit_status_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    bool known = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (known) return; /* saved by an earlier require of kiln in this state */
    /* what arming a budget later would add to the registry, made now: the key
     * klua_compat_sethook turns true at the first count hook, and the C function of
     * klua_compat_hook_revive (a growth of the registry there could be refused) */
    lua_pushlightuserdata(L, (void *)&jit_off_key);
    lua_pushboolean(L, 0);
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_pushcfunction(L, revive_raise);
    lua_pop(L, 1);
    lua_pushlightuserdata(L, (void *)&jit_status_key);
    lua_pushboolean(L, 0); /* false: this state has no jit library (a mod's) */
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "jit");
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "status");
            if (lua_iscfunction(L, -1)) lua_replace(L, -4);
            else lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_rawset(L, LUA_REGISTRYINDEX);
}

void klua_compat_budget_jit_off(lua_State *L) {
    /* only look-ups that cannot allocate before the call, and the call protected: a budget is
     * armed in states at their memory limit too, where nothing may raise */
    lua_pushlightuserdata(L, (void *)&jit_status_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    /* on, or unknown (the call failed): flushed and off either way */
    bool on = lua_pcall(L, 0, 1, 0) != 0 || lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (on) {
        jit_flush_off(L);
    }
}

/* The body of the coroutine klua_compat_hook_revive runs: an error at once. */
static int revive_raise(lua_State *L) {
    lua_pushboolean(L, 0);
    return lua_error(L);
}

static int revive_body(lua_State *L) {
    lua_State *co = lua_newthread(L);
    lua_pushcfunction(L, revive_raise);
    lua_xmove(L, co, 1); /* (pushed on L, under protection: a new thread has room for one) */
    (void)lua_resume(co, 0);
    return 0;
}

void klua_compat_hook_revive(lua_State *L) {
    if (lua_cpcall(L, revive_body, NULL) != 0) lua_pop(L, 1); /* the memory error's message */
}

#undef lua_sethook
void klua_compat_sethook_raw(lua_State *L, lua_Hook f, int mask, int count) { lua_sethook(L, f, mask, count); }

void klua_compat_sethook(lua_State *L, lua_Hook f, int mask, int count) {
    if (f && (mask & LUA_MASKCOUNT)) {
        lua_pushlightuserdata(L, (void *)&jit_off_key);
        lua_rawget(L, LUA_REGISTRYINDEX);
        int off = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!off) {
            jit_flush_off(L);
            lua_pushlightuserdata(L, (void *)&jit_off_key);
            lua_pushboolean(L, 1);
            lua_rawset(L, LUA_REGISTRYINDEX);
        }
    }
    lua_sethook(L, f, mask, count);
}

/* ---- mods ----------------------------------------------------------------------------------- */

#if defined(__GLIBC__)
#include <pthread.h>

bool klua_compat_c_stack_low(void) {
    static _Thread_local char *floor; /* the lowest address a call may start from */
    if (!floor) {
        pthread_attr_t attr;
        void *addr = NULL;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            pthread_attr_getstack(&attr, &addr, &size);
            pthread_attr_destroy(&attr);
        }
        floor = addr && size > (1u << 20) ? (char *)addr + (256u << 10) : (char *)1;
    }
    char here;
    return &here < floor;
}
#else
bool klua_compat_c_stack_low(void) {
    return false;
}
#endif

void klua_compat_sandbox_base(lua_State *L) {
    lua_getglobal(L, LUA_TABLIBNAME);
    lua_getglobal(L, "unpack");
    lua_setfield(L, -2, "unpack");
    lua_pop(L, 1);
    static const char *const drop[] = {"loadstring", "newproxy", "getfenv", "setfenv", "gcinfo",
                                       "module", "unpack", NULL};
    for (int i = 0; drop[i]; i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
}

#else
typedef int klua_compat_unused; /* ISO C wants a declaration in every translation unit */
#endif
