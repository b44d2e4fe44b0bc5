/* lua_host.h: a C host of the suites that run a Lua state out of memory at every allocation
 * in turn (test_persist_lua_memory.c, test_commands_lua_memory.c, test_world_lua_memory.c,
 * test_mods_lua_memory.c; built against Lua 5.4 and, by test-jit-tools, LuaJIT):
 * a Lua state with the kiln module and a world, each on its own counting allocator that can
 * refuse. Test code only. */
#ifndef KILN_TESTS_LUA_HOST_H
#define KILN_TESTS_LUA_HOST_H

#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_lua.h"
#include "suite_main.h"

/* A lua_Alloc / kiln_alloc_fn counting live bytes that refuses growth once `left` reaches 0
 * (left < 0: never), and growth to refuse_from bytes or more (0: none). */
typedef struct budget {
    int64_t left;
    int64_t live, peak;
    size_t refuse_from;
} budget;

static inline void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    budget *b = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        b->live -= (int64_t)old;
        free(ptr);
        return NULL;
    }
    if (nsize > old && (b->left == 0 || (b->refuse_from && nsize >= b->refuse_from))) return NULL;
    if (nsize > old && b->left > 0) b->left--;
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    b->live += (int64_t)nsize - (int64_t)old;
    if (b->live > b->peak) b->peak = b->live;
    return p;
}

typedef struct host {
    budget lua_mem, world_mem;
    lua_State *L;
    kiln_world *world;
} host;

static inline void run(lua_State *L, const char *code) {
    if (luaL_dostring(L, code) != LUA_OK) ck_abort_msg("%s", lua_tostring(L, -1));
}

/* The Lua state with the kiln module (the global kiln) and the host's world, not pushed yet. */
static inline void open_host(host *h) {
    memset(h, 0, sizeof *h);
    h->lua_mem.left = h->world_mem.left = -1;
    h->world = kiln_world_create(&(kiln_world_desc){.alloc = budget_alloc, .alloc_ud = &h->world_mem});
    ck_assert_ptr_nonnull(h->world);
    h->L = lua_newstate(budget_alloc, &h->lua_mem);
    ck_assert_ptr_nonnull(h->L);
    luaL_openlibs(h->L);
    luaL_requiref(h->L, "kiln", luaopen_kiln, 0);
    lua_setglobal(h->L, "kiln");
}

/* The Lua state with the kiln module (the global kiln) and the host's world as the global w,
 * then setup run in it. */
static inline void start(host *h, const char *setup) {
    open_host(h);
    kiln_lua_push_world(h->L, h->world, 0);
    lua_setglobal(h->L, "w");
    run(h->L, setup);
}

/* Closes both; the world must have given back every byte. */
static inline void stop(host *h) {
    lua_close(h->L);
    kiln_world_destroy(h->world);
    ck_assert_int_eq(h->world_mem.live, 0);
}

static inline int add_registry_key(lua_State *L) {
    lua_pushboolean(L, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, lua_touserdata(L, 1));
    return 0;
}

/* Adds key (any address) to h's registry unless that grows the registry past 4 KiB: whether
 * it was added. Brink cases add keys one more each time until this refuses. */
static inline bool add_key_in_room(host *h, const void *key) {
    lua_pushcfunction(h->L, add_registry_key); /* (LuaJIT: a closure, made before growth is refused) */
    lua_pushlightuserdata(h->L, (void *)key);
    h->lua_mem.refuse_from = 4096;
    int rc = lua_pcall(h->L, 1, 0, 0);
    h->lua_mem.refuse_from = 0;
    if (rc != LUA_OK) lua_pop(h->L, 1);
    return rc == LUA_OK;
}

/* Runs code with the Lua state refusing after n grants; returns lua_pcall's code, the error
 * left on the stack when it is not LUA_OK. */
static inline int call_failing_after(host *h, const char *code, int64_t n) {
    ck_assert_int_eq(luaL_loadstring(h->L, code), LUA_OK);
    h->lua_mem.left = n;
    int rc = lua_pcall(h->L, 0, 0, 0);
    h->lua_mem.left = -1;
    return rc;
}

/* Whether a call's error (rc, the message on top) is the memory error. LuaJIT raises a
 * caught error again as a runtime error, so there its message tells. */
static inline bool raised_for_memory(lua_State *L, int rc) {
#if defined(KLUA_LUAJIT) && KLUA_LUAJIT
    const char *msg = lua_tostring(L, -1);
    if (rc == LUA_ERRRUN && msg && strcmp(msg, "not enough memory") == 0) return true;
#endif
    (void)L;
    return rc == LUA_ERRMEM;
}

/* The same, the error dropped: whether code ran to its end. */
static inline bool run_failing_after(host *h, const char *code, int64_t n) {
    int rc = call_failing_after(h, code, n);
    if (rc != LUA_OK) lua_pop(h->L, 1);
    return rc == LUA_OK;
}

#endif
