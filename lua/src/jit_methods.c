/* jit_methods.c: under LuaJIT, what Lua 5.4's to-be-closed variables do for the binding: the
 * collector hold of a World method ends when it returns or raises, and a q:each loop left by
 * break, return or error is closed. Compiled only against LuaJIT (see compat.h). */
#include <string.h>

#include "klua.h"

#if KLUA_LUAJIT

enum { METHOD_UPV_META = KLUA_UPV_META, METHOD_UPV_FN };

/* ---- loops left without closing ---------------------------------------------------------------
 * Lua 5.4 closes q:each's guard when a loop is left; LuaJIT's generic for does not. So the
 * frame running a loop is noted when it begins (its slot in the Lua stack), and a loop still
 * open when its query or its world is used again is checked: it still runs when the frame
 * at that slot holds the query's step function in a live "(for generator)" variable. A left
 * loop is closed as the guard would be on break: its current row is written back (a value
 * that cannot be converted is dropped), its deferred changes land. */

/* The stack slot of the frame lua_getstack found: LuaJIT leaves it in the low 16 bits of
 * i_ci (the frame's size above them). A LuaJIT stack holds at most 65500 slots. */
#define FRAME_SLOT(ar) ((ar).i_ci & 0xffff)

/* The slot of the frame level levels down (1: the caller of the running C function), or -1. */
static int frame_slot(lua_State *L, int level) {
    lua_Debug ar;
    return lua_getstack(L, level, &ar) ? FRAME_SLOT(ar) : -1;
}

/* Whether local i of the frame ar is a live "(for generator)" holding the step function (at
 * step_idx); for an FFI loop (ffi.lua) followed by its "(for state)" holding the loop's
 * number (at step_idx + 1): an FFI step is shared by the queries of a shape, the number tells
 * their loops apart. */
static bool is_generator(lua_State *L, lua_Debug *ar, int i, int step_idx, const klua_query *kq) {
    const char *name = lua_getlocal(L, ar, i);
    if (!name) return false;
    bool found = strcmp(name, "(for generator)") == 0 && lua_rawequal(L, -1, step_idx);
    lua_pop(L, 1);
    if (!found || !kq->ffi_loop) return found;
    name = lua_getlocal(L, ar, i + 1);
    if (!name) return false;
    found = strcmp(name, "(for state)") == 0 && lua_type(L, -1) == LUA_TNUMBER && lua_rawequal(L, -1, step_idx + 1);
    lua_pop(L, 1);
    return found;
}

/* Whether the loop of kq (begun on L, its step function at step_idx, an FFI loop's number
 * above it) still runs. Without debug information to tell, it is taken to run. */
static bool loop_runs(lua_State *L, klua_query *kq, int step_idx) {
    if (kq->jit_height < 0) return true; /* q:bulk's, inside the call that runs it */
    lua_Debug ar;
    for (int level = 1;; level++) { /* down from the caller: frames lie at falling slots */
        if (!lua_getstack(L, level, &ar) || FRAME_SLOT(ar) < kq->jit_height) return false;
        if (FRAME_SLOT(ar) == kq->jit_height) break;
    }
    if (kq->jit_local < 0) /* q:bulk_ffi's: it runs while ffi.lua's method that began it runs */
        return lua_getinfo(L, "S", &ar) && ar.linedefined == -kq->jit_local &&
               strcmp(ar.source, "=lua/kiln/ffi.lua") == 0;
    /* where the generator was found last time: lua_getlocal reads the names from the start */
    if (kq->jit_local > 0 && is_generator(L, &ar, kq->jit_local, step_idx, kq)) return true;
    if (!lua_getinfo(L, "l", &ar)) return true;
    if (ar.currentline < 0) /* a C function, or a stripped chunk: then it cannot tell */
        return lua_getinfo(L, "S", &ar) && strcmp(ar.what, "C") != 0;
    for (int i = 1; lua_getlocal(L, &ar, i) != NULL; i++) {
        lua_pop(L, 1);
        if (i != kq->jit_local && is_generator(L, &ar, i, step_idx, kq)) {
            kq->jit_local = i;
            return true;
        }
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
    /* another system's loop ends with its run; the running system's own, left by break inside
     * that run, is closed as outside systems (Lua 5.4's break closes it there too) */
    if (!kq->active || kq->kw->closed || (kq->owner && kq->owner != kq->kw->current)) return;
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_WORLD);
    bool mine = false;
    if (klua_push_state(L, -1, KLUA_STATE_LOOPS)) {
        lua_pushvalue(L, q_idx);
        lua_rawget(L, -2);
        mine = lua_tothread(L, -1) == L;
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    if (!mine) return; /* another thread's loop: world:progress ends it once it is stuck */
    /* the step the loop was begun with: q:each's, or for an FFI loop its state's (ffi.lua),
     * and that loop's number */
    if (lua_getiuservalue(L, q_idx, kq->ffi_loop ? KLUA_QUERY_UV_FFI : KLUA_QUERY_UV_EACH) == LUA_TTABLE) {
        lua_pushliteral(L, "step");
        lua_rawget(L, -2);
        lua_pushliteral(L, "loop");
        lua_rawget(L, -3);
        lua_remove(L, -3);
    } else {
        lua_pushnil(L);
    }
    bool runs = loop_runs(L, kq, lua_gettop(L) - 1);
    lua_pop(L, 2);
    if (!runs) close_left_loop(L, q_idx);
}

void klua_jit_settle_query(lua_State *L, void *kq, int q_idx) {
    settle_query(L, kq, lua_absindex(L, q_idx));
}

/* Closes every loop of the World at w_idx begun on L and left. */
static void settle_world(lua_State *L, int w_idx) {
    if (!klua_push_state(L, w_idx, KLUA_STATE_LOOPS)) {
        lua_pop(L, 1);
        return;
    }
    int loops = lua_gettop(L);
    /* The queries to check go on the stack above the loops table (closing one changes the
     * table; a table of them would be garbage on every call made inside a loop). */
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, loops)) {
        bool mine = lua_tothread(L, -1) == L;
        lua_pop(L, 1);
        if (!mine || !lua_checkstack(L, 8)) continue;
        lua_pushvalue(L, -1);
        lua_insert(L, loops + 1 + n++); /* below the traversal's key */
    }
    for (int i = 1; i <= n; i++) {
        klua_query *kq = luaL_testudata(L, loops + i, KLUA_QUERY);
        if (kq) settle_query(L, kq, loops + i);
    }
    lua_settop(L, loops - 1);
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
    if (kq && kq->active && !was_active) {
        kq->jit_height = frame_slot(L, 1);
        kq->jit_local = 0;
    }
    return n;
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
void klua_jit_settle_world(lua_State *L, int w_idx) {
    klua_world *kw = luaL_testudata(L, w_idx, KLUA_WORLD);
    if (kw && !kw->closed && !kw->current && kiln_is_deferred(kw->world)) settle_world(L, lua_absindex(L, w_idx));
}

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
        if (kw && !klua_has_tag(L, 1, kw, KLUA_WORLD)) kw = NULL; /* the method raises for it */
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
    klua_jit_unpin(L);
}

/* ---- callables compiled code cannot pin -----------------------------------------------------
 * A trace that calls a C closure guards its identity: the closure is one of the trace's
 * constants, and so are the upvalues of a Lua closure it specialized to (its first three of a
 * prototype; LuaJIT treats the prototype as polymorphic after that). A trace lives until
 * jit.flush or until its prototype is collected, and each new closure met at the same call
 * site adds a side trace (up to about a hundred), each holding its own. So a world whose
 * iterator, getter or step closure a loop called stayed alive, columns and all, long after
 * the script dropped or closed it. What kiln hands out to be called in loops is therefore a
 * Lua closure of one prototype made polymorphic at load, which calls the C closure through
 * one shared C function (through): the traces hold that function and the prototype, and
 * load the C closure as a value. */
#define KLUA_JIT_REG_UNPIN "kiln.unpin" /* registry: the maker of the wrappers */

/* through(cl, ...): calls cl(...), returning what it returns. */
static int through(lua_State *L) {
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static const char UNPIN_SOURCE[] =
    "local through = ...\n"
    "return function(cl) return function(...) return through(cl, ...) end end\n";

void klua_jit_polymorphic(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    for (int i = 0; i < 3; i++) { /* LuaJIT's closure counter of a prototype saturates at three */
        lua_pushvalue(L, idx);
        lua_call(L, 0, 0);
    }
}

static void open_unpin(lua_State *L) {
    if (luaL_loadbuffer(L, UNPIN_SOURCE, sizeof UNPIN_SOURCE - 1, "=(kiln unpin)") != LUA_OK) lua_error(L);
    lua_pushcfunction(L, through);
    lua_call(L, 1, 1); /* the maker */
    klua_jit_polymorphic(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_UNPIN);
}

void klua_jit_unpin(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_UNPIN);
    if (lua_type(L, -1) != LUA_TFUNCTION) { /* a host that cleared the registry: left pinned */
        lua_pop(L, 1);
        return;
    }
    lua_insert(L, -2);
    lua_call(L, 1, 1);
    if (lua_type(L, -1) != LUA_TFUNCTION) /* the registry is the host's to change */
        luaL_error(L, "kiln's '" KLUA_JIT_REG_UNPIN "' was changed through the debug library");
}

/* Replaces every C function in the __index table of class tname with a closure running it
 * through wrapper (upvalues: the metatable, the function). */
static void wrap_class(lua_State *L, const char *tname, lua_CFunction wrapper) {
    luaL_getmetatable(L, tname);
    int meta = lua_gettop(L);
    lua_getfield(L, meta, "__index");
    int methods = meta + 1;
    lua_pushnil(L);
    while (lua_next(L, methods)) {
        lua_CFunction fn = lua_iscfunction(L, -1) ? lua_tocfunction(L, -1) : NULL;
        lua_pop(L, 1);
        if (!fn || fn == wrapper) continue;
        lua_pushvalue(L, -1); /* the name */
        lua_pushvalue(L, meta);
        lua_pushcfunction(L, fn);
        lua_pushcclosure(L, wrapper, METHOD_UPV_FN);
        lua_rawset(L, methods); /* an existing key: the traversal goes on */
    }
    lua_pop(L, 2);
}

void klua_jit_wrap_methods(lua_State *L) {
    open_unpin(L);
    wrap_class(L, KLUA_WORLD, world_method);
    wrap_class(L, KLUA_QUERY, query_method);
}

#else
typedef int klua_jit_methods_unused; /* ISO C wants a declaration in every translation unit */
#endif
