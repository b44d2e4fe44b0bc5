/* compat.c: the Lua 5.4 functions compat.h promises, written over LuaJIT's API. Built in
 * both builds; under Lua 5.4 it holds nothing. User values live in a userdata's fenv table. */
#include "klua.h"

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
            if (n == floor(n) && fabs(n) < 1e15) snprintf(buf, sizeof buf, "%.1f", n); /* 5.4: 1.0 */
            else snprintf(buf, sizeof buf, "%.14g", n);
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

void klua_compat_remember_main(lua_State *L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    int known = lua_type(L, -1) == LUA_TTHREAD;
    lua_pop(L, 1);
    if (known) return;
    lua_pushthread(L);
    lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
}

/* ---- count hooks -------------------------------------------------------------------------- */

static const char jit_off_key = 0; /* registry: true once the JIT was turned off for budgets */

#undef lua_sethook
void klua_compat_sethook(lua_State *L, lua_Hook f, int mask, int count) {
    if (f && (mask & LUA_MASKCOUNT)) {
        lua_pushlightuserdata(L, (void *)&jit_off_key);
        lua_rawget(L, LUA_REGISTRYINDEX);
        int off = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!off) {
            luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
            luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
            lua_pushlightuserdata(L, (void *)&jit_off_key);
            lua_pushboolean(L, 1);
            lua_rawset(L, LUA_REGISTRYINDEX);
        }
    }
    lua_sethook(L, f, mask, count);
}

/* ---- mods ----------------------------------------------------------------------------------- */

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

enum { METHOD_UPV_META = KLUA_UPV_META, METHOD_UPV_FN };

/* ---- loops left without closing ---------------------------------------------------------------
 * Lua 5.4 closes q:each's guard when a loop is left; LuaJIT's generic for does not. So a
 * loop's frame is noted when it begins (its height: frames below it), and a loop still open
 * when its query or its world is used again is checked: it still runs when the frame at that
 * height holds the query's step function in a live "(for generator)" slot. A left loop is
 * closed as the guard would be on break: its current row is written back (a value that
 * cannot be converted is dropped), its deferred changes land. */

/* The number of frames on L's stack (probing doubles, then halves: lua_getstack is linear). */
static int stack_frames(lua_State *L) {
    lua_Debug ar;
    int lo = 0, hi = 1; /* level lo exists; hi is the next to try */
    if (!lua_getstack(L, 0, &ar)) return 0;
    while (lua_getstack(L, hi, &ar)) {
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) { /* level lo exists, level hi does not */
        int mid = lo + (hi - lo) / 2;
        if (lua_getstack(L, mid, &ar)) lo = mid;
        else hi = mid;
    }
    return lo + 1;
}

/* Whether the loop of kq (begun on L, its step function at step_idx) still runs. Without
 * debug information to tell, it is taken to run. */
static bool loop_runs(lua_State *L, klua_query *kq, int step_idx) {
    if (kq->jit_height < 0) return true; /* q:bulk's, inside the call that runs it */
    int level = stack_frames(L) - 1 - kq->jit_height;
    lua_Debug ar;
    if (level < 0 || !lua_getstack(L, level, &ar)) return false;
    if (!lua_getinfo(L, "Sl", &ar)) return true;
    if (ar.currentline < 0) return strcmp(ar.what, "C") != 0; /* stripped: cannot tell */
    const char *name;
    for (int i = 1; (name = lua_getlocal(L, &ar, i)) != NULL; i++) {
        bool found = strcmp(name, "(for generator)") == 0 && lua_rawequal(L, -1, step_idx);
        lua_pop(L, 1);
        if (found) return true;
    }
    return false;
}

/* Closes the open loop of the Query at q_idx as its guard's __close does on break. */
static void close_left_loop(lua_State *L, int q_idx) {
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_GUARD);
    if (luaL_getmetafield(L, -1, "__close") != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return;
    }
    lua_insert(L, -2);
    lua_pushnil(L); /* no error: the loop was left by break or return */
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) lua_pop(L, 1); /* the row is dropped, the loop ended */
}

/* Closes the loop of the Query at q_idx when it was begun on L and left. */
static void settle_query(lua_State *L, klua_query *kq, int q_idx) {
    if (!kq->active || kq->kw->closed || kq->owner) return; /* a system's ends with its run */
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_WORLD);
    lua_getiuservalue(L, -1, KLUA_WORLD_UV_STATE);
    lua_getfield(L, -1, KLUA_STATE_LOOPS);
    lua_pushvalue(L, q_idx);
    lua_rawget(L, -2);
    bool mine = lua_tothread(L, -1) == L;
    lua_pop(L, 4);
    if (!mine) return; /* another thread's loop: world:progress ends it once it is stuck */
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_EACH);
    bool runs = loop_runs(L, kq, lua_gettop(L));
    lua_pop(L, 1);
    if (!runs) close_left_loop(L, q_idx);
}

/* Closes every loop of the World at w_idx begun on L and left. */
static void settle_world(lua_State *L, int w_idx) {
    lua_getiuservalue(L, w_idx, KLUA_WORLD_UV_STATE);
    if (lua_getfield(L, -1, KLUA_STATE_LOOPS) != LUA_TTABLE) {
        lua_pop(L, 2);
        return;
    }
    int loops = lua_gettop(L);
    lua_newtable(L); /* the queries to check: closing one changes the loops table */
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, loops)) {
        bool mine = lua_tothread(L, -1) == L;
        lua_pop(L, 1);
        if (!mine) continue;
        lua_pushvalue(L, -1);
        lua_rawseti(L, loops + 1, ++n);
    }
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, loops + 1, i);
        klua_query *kq = luaL_testudata(L, -1, KLUA_QUERY);
        if (kq) settle_query(L, kq, lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pop(L, 3);
}

typedef struct height_scope {
    klua_query *kq;
    int saved;
} height_scope;

static void end_height_scope(height_scope *s) {
    if (s->kq && s->kq->jit_height < 0) s->kq->jit_height = s->saved;
}

static int query_method(lua_State *L) {
    lua_CFunction fn = lua_tocfunction(L, lua_upvalueindex(METHOD_UPV_FN));
    klua_query *kq = luaL_testudata(L, 1, KLUA_QUERY);
    if (kq && kq->active && kq->query) settle_query(L, kq, 1);
    bool was_active = kq && kq->active;
    /* while the method runs, an iteration it began (q:bulk) runs inside it */
    height_scope scope __attribute__((cleanup(end_height_scope))) = {kq, kq ? kq->jit_height : 0};
    if (kq) kq->jit_height = -1;
    int n = fn(L);
    /* q:each began a loop: it runs in the caller's frame, one below this function */
    if (kq && kq->active && !was_active) kq->jit_height = stack_frames(L) - 2;
    return n;
}

void klua_compat_setquerymethods(lua_State *L, const luaL_Reg *methods) {
    for (; methods->name; methods++) {
        lua_pushvalue(L, -1);
        lua_pushcfunction(L, methods->func);
        lua_pushcclosure(L, query_method, METHOD_UPV_FN);
        lua_setfield(L, -3, methods->name);
    }
    lua_pop(L, 1);
}

/* ---- World methods and the collector hold --------------------------------------------------- */

typedef struct hold_scope {
    lua_State *L;
    klua_world *kw; /* the World at argument 1, or NULL */
    bool was_held;
    bool returned;  /* false while an error unwinds the method */
} hold_scope;

/* Ends the hold the method took. Returning, the debt is paid back as klua_release_gc does;
 * unwinding, no Lua code may run: the collector only restarts, and the debt waits for the
 * next release. */
static void end_scope(hold_scope *s) {
    klua_world *kw = s->kw;
    if (!kw || s->was_held || !kw->gc_held) return;
    if (s->returned) {
        klua_release_gc(s->L, kw);
        return;
    }
    kw->gc_held = false;
    int64_t grown = (int64_t)lua_gc(s->L, LUA_GCCOUNT, 0) * 1024 + lua_gc(s->L, LUA_GCCOUNTB, 0) - kw->gc_held_bytes;
    lua_gc(s->L, LUA_GCRESTART, 0);
    if (grown > 0) kw->gc_owed_bytes += grown;
}

static int world_method(lua_State *L) {
    lua_CFunction fn = lua_tocfunction(L, lua_upvalueindex(METHOD_UPV_FN));
    klua_world *kw = NULL;
    if (lua_type(L, 1) == LUA_TUSERDATA && lua_getmetatable(L, 1)) {
        if (lua_rawequal(L, -1, lua_upvalueindex(METHOD_UPV_META))) kw = lua_touserdata(L, 1);
        lua_pop(L, 1);
    }
    /* a loop left open would keep the world deferred: end it first (outside systems) */
    if (kw && !kw->closed && !kw->current && kiln_is_deferred(kw->world)) settle_world(L, 1);
    hold_scope scope __attribute__((cleanup(end_scope))) = {L, kw, kw ? kw->gc_held : true, false};
    int n = fn(L);
    scope.returned = true;
    return n;
}

/* A closure pushed by klua_pushcclosure_world: its own upvalues, then the function. */
static int world_closure(lua_State *L) {
    int fn_upv = 2;
    while (lua_type(L, lua_upvalueindex(fn_upv)) != LUA_TNONE) fn_upv++;
    lua_CFunction fn = lua_tocfunction(L, lua_upvalueindex(fn_upv - 1));
    klua_world *kw = luaL_testudata(L, lua_upvalueindex(1), KLUA_WORLD);
    hold_scope scope __attribute__((cleanup(end_scope))) = {L, kw, kw ? kw->gc_held : true, false};
    int n = fn(L);
    scope.returned = true;
    return n;
}

void klua_pushcclosure_world(lua_State *L, lua_CFunction fn, int n) {
    lua_pushcfunction(L, fn);
    lua_pushcclosure(L, world_closure, n + 1);
}

void klua_compat_setmethods(lua_State *L, const luaL_Reg *methods) {
    for (; methods->name; methods++) {
        lua_pushvalue(L, -1);
        lua_pushcfunction(L, methods->func);
        lua_pushcclosure(L, world_method, METHOD_UPV_FN);
        lua_setfield(L, -3, methods->name);
    }
    lua_pop(L, 1);
}

#else
typedef int klua_compat_unused; /* ISO C wants a declaration in every translation unit */
#endif
