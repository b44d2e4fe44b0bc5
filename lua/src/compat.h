/* compat.h: the Lua 5.4 C API the binding uses, mapped onto LuaJIT 2.1 (5.1 plus its 5.2
 * extensions) when built against LuaJIT; under Lua 5.4 it defines KLUA_LUAJIT 0, the two
 * protected-call helpers below and the LuaJIT hooks as no-ops. */
#ifndef KLUA_COMPAT_H
#define KLUA_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if defined(LUA_VERSION_NUM) && LUA_VERSION_NUM == 501
#define KLUA_LUAJIT 1
#else
#define KLUA_LUAJIT 0
#endif

/* Both builds have, for code that must not raise (a C caller such as the core or the persist
 * loader is below it on the C stack, or the world is changed and must not be left so):
 *   klua_push_c(L, fn): pushes fn and returns true, or pushes nothing and returns false when
 *     there is no memory to make it (LuaJIT: a C function is an object, made on first use);
 *   klua_pcall_c(L, fn, nargs, nresults, msgh): lua_pcall of fn with the nargs values on top
 *     (msgh an absolute index or 0); without memory to make fn, the values are replaced by
 *     the memory error's message and LUA_ERRMEM is returned, as the call would have.
 * The caller keeps one slot of stack room beyond the values. */
/* Raises Lua's memory error for an allocation of the binding's own that failed: the message
 * "not enough memory" with no position, which 5.4's lua_error raises as LUA_ERRMEM like its own
 * allocator's failures (it is interned: pushing it allocates nothing). LuaJIT's lua_error keeps
 * no memory status (lua-api.md). Every out-of-memory raise of the binding goes through here. */
static inline int klua_no_memory(lua_State *L) {
    lua_pushliteral(L, "not enough memory");
    return lua_error(L);
}

#if KLUA_LUAJIT

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <luajit.h>

#if !defined(__EXCEPTIONS)
/* A World method's hold on the collector is released by a cleanup handler that runs while
 * a Lua error unwinds the method (LuaJIT's errors are C++-compatible exceptions on x64):
 * without -fexceptions the handler would be skipped and the collector left stopped. */
#error "the LuaJIT build of the kiln binding needs -fexceptions"
#endif

#if defined(__GNUC__)
#define KLUA_COMPAT_HIDDEN __attribute__((visibility("hidden")))
#else
#define KLUA_COMPAT_HIDDEN
#endif

/* ---- names and constants Lua 5.4 has and LuaJIT lacks --------------------------------- */
typedef uint64_t lua_Unsigned;
#define LUA_MAXINTEGER ((lua_Integer)INT64_MAX)
#define LUA_MININTEGER ((lua_Integer)INT64_MIN)
#define LUA_GNAME "_G"
#define LUA_LOADED_TABLE "_LOADED"
/* The generational mode does not exist: asking for it changes nothing (klua_compat_gc). */
#define LUA_GCGEN 10
#define LUA_GCINC 11
#define lua_rawlen(L, i) lua_objlen((L), (i))
#define luaL_len(L, i) ((lua_Integer)lua_objlen((L), (i)))
#define lua_pushglobaltable(L) lua_pushvalue((L), LUA_GLOBALSINDEX)
#define luaL_checkversion(L) ((void)(L))
#define lua_load(L, reader, data, chunk, mode) lua_loadx((L), (reader), (data), (chunk), (mode))
/* LuaJIT's dump has no strip flag; what it writes is LuaJIT bytecode, which bounded.c does
 * not recognise (so no callback is charged whole: every row's instructions are counted). */
#define lua_dump(L, writer, data, strip) (lua_dump)((L), (writer), (data))
/* A pointer-sized slot per state (5.4 gives one per thread, LuaJIT none): a userdata held by
 * the registry, made on first use. Reached only once bounded.c charges a callback whole,
 * which it never does under LuaJIT. */
KLUA_COMPAT_HIDDEN void *klua_compat_extraspace(lua_State *L);
#define lua_getextraspace(L) klua_compat_extraspace(L)

static inline int lua_absindex(lua_State *L, int i) {
    return i > 0 || i <= LUA_REGISTRYINDEX ? i : lua_gettop(L) + i + 1;
}

/* ---- calls that return the type of what they pushed in 5.4 ---------------------------- */
static inline int klua_compat_getfield(lua_State *L, int i, const char *k) {
    lua_getfield(L, i, k);
    return lua_type(L, -1);
}
static inline int klua_compat_getglobal(lua_State *L, const char *k) {
    lua_getfield(L, LUA_GLOBALSINDEX, k);
    return lua_type(L, -1);
}
static inline int klua_compat_rawget(lua_State *L, int i) {
    lua_rawget(L, i);
    return lua_type(L, -1);
}
/* LuaJIT's rawgeti/rawseti take an int: larger keys (entity handles) go through rawget. */
static inline int klua_compat_rawgeti(lua_State *L, int i, lua_Integer n) {
    if (n == (int)n) {
        lua_rawgeti(L, i, (int)n);
    } else {
        i = lua_absindex(L, i);
        lua_pushnumber(L, (lua_Number)n);
        lua_rawget(L, i);
    }
    return lua_type(L, -1);
}
static inline void klua_compat_rawseti(lua_State *L, int i, lua_Integer n) {
    if (n == (int)n) {
        lua_rawseti(L, i, (int)n);
        return;
    }
    i = lua_absindex(L, i);
    lua_pushnumber(L, (lua_Number)n);
    lua_insert(L, -2);
    lua_rawset(L, i);
}
static inline int klua_compat_gettable(lua_State *L, int i) {
    lua_gettable(L, i);
    return lua_type(L, -1);
}
/* LuaJIT's lua_pushlstring takes a collector step before it copies the bytes (5.4's after):
 * a finalizer run there may close the world or despawn the row the bytes live in (a
 * component's name, a char array's value), and the copy then read freed memory. The bytes
 * are copied out first: on the stack, or through the state's allocator, which runs no step.
 * A copy of the allocator's is pushed in protected mode, so that a push refused for memory
 * (a mod at its limit) frees it before the error goes on; the string comes back through a
 * registry slot, since lua_cpcall keeps no results. */
KLUA_COMPAT_HIDDEN extern char klua_compat_push_slot; /* its address is the registry key (compat.c) */
typedef struct klua_compat_bytes {
    const char *s;
    size_t n;
} klua_compat_bytes;
static inline int klua_compat_push_protected(lua_State *L) {
    const klua_compat_bytes *b = (const klua_compat_bytes *)lua_touserdata(L, 1);
    lua_pushlightuserdata(L, &klua_compat_push_slot);
    lua_pushlstring(L, b->s, b->n);
    lua_rawset(L, LUA_REGISTRYINDEX);
    return 0;
}
static inline const char *klua_compat_pushlstring(lua_State *L, const char *s, size_t n) {
    char small[256];
    if (n <= sizeof small) {
        if (n) memcpy(small, s, n);
        lua_pushlstring(L, small, n);
        return lua_tostring(L, -1);
    }
    if (!lua_checkstack(L, 4)) luaL_error(L, "stack overflow");
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    char *copy = (char *)fa(ud, NULL, 0, n);
    if (!copy) klua_no_memory(L);
    memcpy(copy, s, n);
    klua_compat_bytes b = {copy, n};
    int status = lua_cpcall(L, klua_compat_push_protected, &b);
    fa(ud, copy, n, 0);
    if (status != 0) lua_error(L); /* the push's error, the copy freed */
    lua_pushlightuserdata(L, &klua_compat_push_slot);
    lua_rawget(L, LUA_REGISTRYINDEX);
    lua_pushlightuserdata(L, &klua_compat_push_slot);
    lua_pushnil(L);
    lua_rawset(L, LUA_REGISTRYINDEX); /* an existing key: allocates nothing */
    return lua_tostring(L, -1);
}
static inline const char *klua_compat_pushstring(lua_State *L, const char *s) {
    if (!s) {
        lua_pushnil(L);
        return NULL;
    }
    return klua_compat_pushlstring(L, s, strlen(s));
}
static inline int klua_compat_getmetafield(lua_State *L, int obj, const char *e) {
    return luaL_getmetafield(L, obj, e) ? lua_type(L, -1) : LUA_TNIL;
}
#undef lua_getglobal
#define lua_getfield(L, i, k) klua_compat_getfield((L), (i), (k))
#define lua_getglobal(L, k) klua_compat_getglobal((L), (k))
#define lua_rawget(L, i) klua_compat_rawget((L), (i))
#define lua_rawgeti(L, i, n) klua_compat_rawgeti((L), (i), (n))
#define lua_rawseti(L, i, n) klua_compat_rawseti((L), (i), (n))
#define lua_gettable(L, i) klua_compat_gettable((L), (i))
#define luaL_getmetafield(L, obj, e) klua_compat_getmetafield((L), (obj), (e))
#define lua_pushlstring(L, s, n) klua_compat_pushlstring((L), (s), (n))
#define lua_pushstring(L, s) klua_compat_pushstring((L), (s))

/* ---- light-userdata keys ---------------------------------------------------------------- */
static inline int lua_rawgetp(lua_State *L, int i, const void *p) {
    i = lua_absindex(L, i);
    lua_pushlightuserdata(L, (void *)p);
    return klua_compat_rawget(L, i);
}
static inline void lua_rawsetp(lua_State *L, int i, const void *p) {
    i = lua_absindex(L, i);
    lua_pushlightuserdata(L, (void *)p);
    lua_insert(L, -2);
    lua_rawset(L, i);
}

/* ---- C functions: 5.4 pushes them without allocating, LuaJIT makes a closure each time ---- */
/* Pushes fn, made once per state and kept in the registry (keyed by its address), so a
 * method that pushes a C function per call makes no garbage. Its first push in a state
 * allocates, so it can raise: code that must not raise uses klua_push_c or klua_pcall_c. */
KLUA_COMPAT_HIDDEN void klua_compat_pushcfunction(lua_State *L, lua_CFunction fn);
#undef lua_pushcfunction
#define lua_pushcfunction(L, fn) klua_compat_pushcfunction((L), (fn))
KLUA_COMPAT_HIDDEN bool klua_push_c(lua_State *L, lua_CFunction fn);
KLUA_COMPAT_HIDDEN int klua_pcall_c(lua_State *L, lua_CFunction fn, int nargs, int nresults, int msgh);

/* ---- integers: LuaJIT's numbers are doubles ----------------------------------------------
 * A number is an integer when it has no fraction and lies in [-2^63, 2^63): what a 5.4
 * float with an exact integer representation converts to. Integers above 2^53 lose their
 * low bits on the way in (entity handles stay below 2^53 by design). */
static inline int klua_compat_number_integer(lua_Number n, lua_Integer *dest) {
    if (!(n == floor(n)) || n < -9223372036854775808.0 || n >= 9223372036854775808.0) return 0;
    *dest = (lua_Integer)n;
    return 1;
}
static inline lua_Integer klua_compat_tointegerx(lua_State *L, int i, int *isnum) {
    int ok = 0;
    lua_Integer v = 0;
    lua_Number n = lua_tonumberx(L, i, &ok);
    if (ok) ok = klua_compat_number_integer(n, &v);
    if (isnum) *isnum = ok;
    return ok ? v : 0;
}
static inline int lua_isinteger(lua_State *L, int i) {
    lua_Integer v;
    return lua_type(L, i) == LUA_TNUMBER && klua_compat_number_integer(lua_tonumber(L, i), &v);
}
#undef lua_tointeger
#define lua_tointegerx(L, i, isnum) klua_compat_tointegerx((L), (i), (isnum))
#define lua_tointeger(L, i) klua_compat_tointegerx((L), (i), NULL)
KLUA_COMPAT_HIDDEN lua_Integer klua_compat_checkinteger(lua_State *L, int arg);
KLUA_COMPAT_HIDDEN lua_Integer klua_compat_optinteger(lua_State *L, int arg, lua_Integer def);
#define luaL_checkinteger(L, arg) klua_compat_checkinteger((L), (arg))
#define luaL_optinteger(L, arg, def) klua_compat_optinteger((L), (arg), (def))

/* ---- user values: n numbered slots in the userdata's environment table ------------------ */
KLUA_COMPAT_HIDDEN void *lua_newuserdatauv(lua_State *L, size_t size, int nuvalue);
KLUA_COMPAT_HIDDEN int lua_getiuservalue(lua_State *L, int idx, int n);
KLUA_COMPAT_HIDDEN int lua_setiuservalue(lua_State *L, int idx, int n);

/* ---- stack and auxiliary functions ------------------------------------------------------ */
KLUA_COMPAT_HIDDEN void lua_rotate(lua_State *L, int idx, int n);
KLUA_COMPAT_HIDDEN void luaL_requiref(lua_State *L, const char *modname, lua_CFunction openf, int glb);
KLUA_COMPAT_HIDDEN int luaL_getsubtable(lua_State *L, int idx, const char *fname);
KLUA_COMPAT_HIDDEN const char *luaL_tolstring(lua_State *L, int idx, size_t *len);
KLUA_COMPAT_HIDDEN int luaL_typeerror(lua_State *L, int arg, const char *tname);
/* luaL_newmetatable that also sets __name, as 5.4's does. */
KLUA_COMPAT_HIDDEN int klua_compat_newmetatable(lua_State *L, const char *tname);
#define luaL_newmetatable klua_compat_newmetatable

/* ---- messages: the formats of 5.4's lua_pushfstring (%s %d %I %f %p %c %U %%) ----------- */
KLUA_COMPAT_HIDDEN const char *klua_compat_pushvfstring(lua_State *L, const char *fmt, va_list ap);
KLUA_COMPAT_HIDDEN const char *klua_compat_pushfstring(lua_State *L, const char *fmt, ...);
KLUA_COMPAT_HIDDEN int klua_compat_error(lua_State *L, const char *fmt, ...);
#define lua_pushvfstring klua_compat_pushvfstring
#define lua_pushfstring klua_compat_pushfstring
#define luaL_error klua_compat_error

/* ---- the collector: lua_gc with 5.4's arguments ------------------------------------------ */
KLUA_COMPAT_HIDDEN int klua_compat_gc(lua_State *L, int what, ...);
#define lua_gc klua_compat_gc

/* ---- the main thread: 5.4 keeps it in the registry, LuaJIT does not ------------------- */
#define LUA_RIDX_MAINTHREAD 1
/* Remembers L's main thread in the registry (called by luaopen_kiln: when the module is
 * opened inside a coroutine, that coroutine stands in for it). */
KLUA_COMPAT_HIDDEN void klua_compat_remember_main(lua_State *L);
KLUA_COMPAT_HIDDEN lua_State *klua_compat_main_thread(lua_State *L);

/* ---- count hooks: compiled code never calls them ---------------------------------------- */
/* lua_sethook that, when it sets a count hook (an instruction budget), first flushes the
 * state's compiled traces and turns the JIT compiler off for good: budgets count every
 * instruction only in the interpreter. */
KLUA_COMPAT_HIDDEN void klua_compat_sethook(lua_State *L, lua_Hook f, int mask, int count);
/* Arming a budget: the host may have turned the JIT back on (jit.on()) since a budget turned
 * it off, and compiled code calls no hook; when jit.status (as saved at load) says it is on,
 * the compiled traces are flushed and the JIT turned off again. Nothing in a state without
 * the jit library (a mod's). klua_compat_remember_jit saves jit.status at load (so a script
 * replacing it later changes nothing), or false where there is none, and makes the registry
 * key klua_compat_sethook sets (so a budget armed later adds none). */
KLUA_COMPAT_HIDDEN void klua_compat_budget_jit_off(lua_State *L);
KLUA_COMPAT_HIDDEN void klua_compat_remember_jit(lua_State *L);
/* LuaJIT marks its hook active while the hook runs, and an error the hook raises that
 * lua_load catches (a budget spent inside a reader function given to load) leaves the mark:
 * no hook runs in the state again. A coroutine ending in an error clears it, so this runs
 * one (made under protection; nothing when memory fails). Called after a budget that was
 * spent and before each console statement. */
KLUA_COMPAT_HIDDEN void klua_compat_hook_revive(lua_State *L);
/* lua_sethook itself, for where the stack may not be whole: an allocator's charge (LuaJIT
 * growing a stack has freed the old one before L->top moves) changing a count hook that is
 * already set (so the JIT is off). It touches no stack; LuaJIT calls it from a signal. */
KLUA_COMPAT_HIDDEN void klua_compat_sethook_raw(lua_State *L, lua_Hook f, int mask, int count);
#define lua_sethook klua_compat_sethook

/* ---- mods: what LuaJIT's base library adds that a sandbox must not have ----------------- */
/* Removes loadstring (it takes bytecode), newproxy (finalizers), getfenv/setfenv, gcinfo,
 * module and the global unpack, and adds table.unpack (so it can be wrapped and charged). */
KLUA_COMPAT_HIDDEN void klua_compat_sandbox_base(lua_State *L);
/* LuaJIT checks no C stack depth: a mod recursing through C functions that call back into Lua
 * (string.gsub's function, print's __tostring, require) overflowed it and crashed the host.
 * True when less than 256 KiB of the thread's stack is left (glibc; elsewhere never). */
KLUA_COMPAT_HIDDEN bool klua_compat_c_stack_low(void);

/* ---- jit_methods.c: what to-be-closed variables do under 5.4 ----------------------------- */
/* Wraps the C methods of World and Query (luaopen_kiln, before the Lua layer loads) in
 * closures that run them and then: World, release the collector hold the method took on
 * the World at argument 1, also when it raises; Query, first end the query's loop when it
 * was left (break, return, error: LuaJIT's generic for closes nothing), and note the frame
 * where a loop q:each begins runs. */
KLUA_COMPAT_HIDDEN void klua_jit_wrap_methods(lua_State *L);
/* lua_pushcclosure for a closure whose upvalue 1 is a World and that may hold the
 * collector (klua_hold_gc): the hold ends when the closure returns or raises. What it pushes
 * is unpinned (klua_jit_unpin). */
KLUA_COMPAT_HIDDEN void klua_pushcclosure_world(lua_State *L, lua_CFunction fn, int n);
/* Replaces the function at the top (a C closure holding a World, a Query or what leads to
 * one) with a Lua closure that calls it, which compiled code cannot pin (jit_methods.c): for
 * what kiln hands out to be called in loops. */
KLUA_COMPAT_HIDDEN void klua_jit_unpin(lua_State *L);
/* Calls the chunk at idx three times with no arguments, so that the prototype of the closure
 * it returns is polymorphic: compiled code then holds the prototype, not the closures (nor
 * their upvalues). The chunk must do nothing else. */
KLUA_COMPAT_HIDDEN void klua_jit_polymorphic(lua_State *L, int idx);
/* Closes the loop of the Query at q_idx (whose userdata is kq) when it was begun on L and
 * left by break, return or error. */
KLUA_COMPAT_HIDDEN void klua_jit_settle_query(lua_State *L, void *kq, int q_idx);
/* Closes every loop of the World at w_idx begun on L and left, as a World method called
 * outside a system does first (the mod manager's methods do it too: a left loop would keep the
 * world deferred, which they refuse). */
KLUA_COMPAT_HIDDEN void klua_jit_settle_world(lua_State *L, int w_idx);
/* ---- jit_views.c: the FFI views of q:each_ffi ---------------------------------------------- */
/* Stores in the table at layer_idx (the Lua layer's private table), as field views, the C
 * half of the FFI loops, which lua/kiln/ffi.lua drives; nothing when the state has no ffi
 * library (a mod's). */
KLUA_COMPAT_HIDDEN void klua_jit_open_views(lua_State *L, int layer_idx);
/* Pushes a table describing one field for the FFI layer: name, ctype (the FFI declaration, or
 * absent), type (the schema name), count, offset and elem_size. */
struct kiln_field;
KLUA_COMPAT_HIDDEN void klua_jit_push_field(lua_State *L, const struct kiln_field *fd);
#define KLUA_JIT_REG_EACH "kiln.ffi_each" /* registry: the each-system runner below */
#define KLUA_JIT_REG_FFI "kiln.ffi"       /* registry: the ffi module kiln opened or found */
#define KLUA_JIT_REG_SHARED "kiln.ffi_shared" /* registry: lua/kiln/ffi.lua's types, per state */
struct klua_world;
/* Pushes the function that runs a Lua each-system's rows with FFI views (lua/kiln/ffi.lua,
 * called as fn(query, each, dt)) and returns true, or pushes nothing and returns false where
 * the table path must run: a mod's world, a budget, a state without the ffi library. */
KLUA_COMPAT_HIDDEN bool klua_jit_push_each_runner(lua_State *L, struct klua_world *kw);
/* Around a Lua system's run: pushes the system a write to a read-only FFI view names (ffi.lua's
 * shared.running_system, set when a loop begins), and afterwards sets it back from idx (and
 * removes idx), so a run nested in another's loop (another world's progress) leaves the outer
 * system named. A mod's world: nil pushed and nothing looked up (no allocation, so a state at
 * its memory limit cannot raise out of the schedule's run). */
KLUA_COMPAT_HIDDEN void klua_jit_push_running(lua_State *L, const struct klua_world *kw);
KLUA_COMPAT_HIDDEN void klua_jit_restore_running(lua_State *L, const struct klua_world *kw, int idx);

/* ---- jit_spawn.c: world:spawn's FFI path ------------------------------------------------------ */
/* Stores in the table at layer_idx, as field spawn, the C half of lua/kiln/ffi_spawn.lua;
 * nothing where klua_jit_open_views stored no views (call it after). */
KLUA_COMPAT_HIDDEN void klua_jit_open_spawn(lua_State *L, int layer_idx);

#else /* Lua 5.4 */

#include <stdbool.h>

/* A light C function: pushing one never allocates. */
static inline bool klua_push_c(lua_State *L, lua_CFunction fn) {
    lua_pushcfunction(L, fn);
    return true;
}
static inline int klua_pcall_c(lua_State *L, lua_CFunction fn, int nargs, int nresults, int msgh) {
    lua_pushcfunction(L, fn);
    lua_insert(L, -(nargs + 1));
    return lua_pcall(L, nargs, nresults, msgh);
}

#define klua_compat_remember_main(L) ((void)(L))
#define klua_compat_c_stack_low() false /* Lua 5.4 counts C calls itself */
#define klua_compat_budget_jit_off(L) ((void)(L))
#define klua_compat_hook_revive(L) ((void)(L))
#define klua_compat_sethook_raw lua_sethook
#define klua_compat_remember_jit(L) ((void)(L))
#define klua_jit_wrap_methods(L) ((void)(L))
#define klua_pushcclosure_world(L, fn, n) lua_pushcclosure((L), (fn), (n))
#define klua_jit_unpin(L) ((void)(L))
#define klua_jit_polymorphic(L, idx) ((void)(L), (void)(idx))
#define klua_jit_open_views(L, layer_idx) ((void)(L), (void)(layer_idx))
#define klua_jit_push_each_runner(L, kw) ((void)(L), (void)(kw), false)
#define klua_jit_push_running(L, kw) ((void)(L), (void)(kw))
#define klua_jit_restore_running(L, kw, idx) ((void)(L), (void)(kw), (void)(idx))
#define klua_jit_open_spawn(L, layer_idx) ((void)(L), (void)(layer_idx))

#endif
#endif
