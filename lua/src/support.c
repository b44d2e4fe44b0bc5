/* support.c: what every file of the binding shares: the error shapes, class metatables, the
 * World behind a method, scratch memory and name look-ups. Calls nothing else of the binding. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KLUA_SUPPORT_C /* the checks below call the real luaL_testudata */
#include "klua.h"
#include "refs.h"

/* ---- errors ------------------------------------------------------------------------------ */

/* Methods ("world:get") count arguments after self, as Lua's own messages do. */
void klua_argerror(lua_State *L, int arg, const char *fname, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    bool method = strchr(fname, ':') != NULL;
    if (method && arg == 1) lua_pushfstring(L, "calling '%s' on bad self (%s)", fname, lua_tostring(L, -1));
    else lua_pushfstring(L, "bad argument #%d to '%s' (%s)", method ? arg - 1 : arg, fname, lua_tostring(L, -1));
    lua_error(L);
    for (;;) {} /* not reached: lua_error does not return */
}

static const char *got_name(lua_State *L, int idx);

void klua_typeerror(lua_State *L, int arg, const char *fname, const char *expected) {
    klua_argerror(L, arg, fname, "%s expected, got %s", expected, got_name(L, arg));
}

void klua_fail(lua_State *L, const char *fname, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_pushfstring(L, "%s: %s", fname, lua_tostring(L, -1));
    lua_error(L);
    for (;;) {}
}

void klua_raise(lua_State *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_error(L);
    for (;;) {}
}

const char *klua_core_detail(const char *msg) {
    if (strncmp(msg, "kiln_", 5) != 0) return msg;
    const char *p = msg + 5;
    while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_') p++;
    return p[0] == ':' && p[1] == ' ' ? p + 2 : msg;
}

void klua_fail_world(lua_State *L, const kiln_world *world, const char *fname) {
    klua_fail(L, fname, "%s", klua_core_detail(kiln_world_error(world)));
}

const char *klua_quote(lua_State *L, const char *s, size_t len) {
    size_t n = len <= KLUA_QUOTE_MAX ? len : KLUA_QUOTE_MAX;
    if (n == len && !memchr(s, 0, n)) return lua_pushlstring(L, s, len);
    /* a zero byte shows as \0: a message, a C string, would end there */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        if (s[i]) luaL_addchar(&b, s[i]);
        else luaL_addstring(&b, "\\0");
    }
    if (n < len) luaL_addstring(&b, "...");
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

void klua_check_keys(lua_State *L, int idx, int arg, const char *fname, const char *const *keys,
                     bool allow_list) {
    idx = lua_absindex(L, idx);
    lua_Unsigned len = allow_list ? lua_rawlen(L, idx) : 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING) {
            size_t klen;
            const char *k = lua_tolstring(L, -1, &klen);
            bool known = false; /* "without\0x" is no key: raw reads of "without" miss it */
            for (int i = 0; keys[i] && !known && strlen(k) == klen; i++) known = strcmp(keys[i], k) == 0;
            if (known) continue;
        } else if (allow_list && lua_isinteger(L, -1)) {
            lua_Integer i = lua_tointeger(L, -1);
            if (i >= 1 && (lua_Unsigned)i <= len) continue;
        }
        /* What would have been accepted, then what was given (the key is not converted in
         * place: the traversal ends here anyway). */
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (int i = 0; keys[i]; i++) {
            luaL_addstring(&b, i ? ", " : "");
            luaL_addstring(&b, keys[i]);
        }
        if (allow_list) luaL_addstring(&b, keys[0] ? " and a list" : "a list");
        luaL_pushresult(&b);
        const char *expected = lua_tostring(L, -1);
        const char *given;
        if (kt == LUA_TSTRING) {
            size_t n;
            const char *s = lua_tolstring(L, -2, &n);
            given = lua_pushfstring(L, "key '%s'", klua_quote(L, s, n));
        } else if (kt == LUA_TNUMBER) {
            lua_pushvalue(L, -2);
            given = lua_pushfstring(L, "key [%s]", lua_tostring(L, -1));
        } else {
            given = lua_pushfstring(L, "%s key", lua_typename(L, kt));
        }
        klua_argerror(L, arg, fname, "unknown %s (expected %s)", given, expected);
    }
}

/* ---- classes --------------------------------------------------------------------------- */

static int readonly_newindex(lua_State *L) {
    return luaL_error(L, "the methods of %s cannot be changed",
                      lua_tostring(L, lua_upvalueindex(1)));
}

static int readonly_next(lua_State *L) {
    lua_settop(L, 2);
    return lua_next(L, lua_upvalueindex(1)) ? 2 : (lua_pushnil(L), 1);
}

static int readonly_pairs(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, readonly_next, 1);
    lua_pushnil(L);
    lua_pushnil(L);
    return 3;
}

/* Pushes what getmetatable(obj) shows scripts: {__name =, __index = a read-only view of the
 * methods}. The real metatable (and its __gc, __close) stays out of reach (setmetatable is
 * refused too), so no script can collect an object early or change a class's methods for
 * everyone; only code holding the debug library sees the real one. What the table itself
 * says (its __name) kiln never reads: it reads the real metatable (layer.class_name). */
static void push_readonly(lua_State *L, const char *tname, int fields_idx) {
    fields_idx = lua_absindex(L, fields_idx);
    lua_newtable(L); /* empty: reads and iteration reach the fields */
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, fields_idx);
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, tname);
    lua_pushcclosure(L, readonly_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, fields_idx);
    lua_pushcclosure(L, readonly_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
}

void klua_push_public_meta(lua_State *L, const char *tname, int methods_idx) {
    methods_idx = lua_absindex(L, methods_idx);
    lua_createtable(L, 0, 2);
    lua_pushstring(L, tname);
    lua_setfield(L, -2, "__name");
    push_readonly(L, tname, methods_idx);
    lua_setfield(L, -2, "__index");
}

/* The tag of class tname: the first 8 bytes of its name ("kiln.Wor", "kiln.Que", ...: distinct
 * for kiln's classes) mixed with the address of this object, so no script can write it. */
static const char tag_salt;

static uint64_t class_tag(const char *tname) {
    uint64_t name;
    memcpy(&name, tname, sizeof name); /* a class name has 8 bytes or more with its NUL */
    return name ^ (uint64_t)(uintptr_t)&tag_salt;
}

/* The tag's place: after the struct, rounded up to 8 bytes. */
#define TAG_AT(size) (((size) + 7) & ~(size_t)7)

void *klua_newobject(lua_State *L, size_t size, int nuvalue, const char *tname) {
    size_t at = TAG_AT(size);
    uint8_t *p = lua_newuserdatauv(L, at + sizeof(uint64_t), nuvalue);
    memset(p, 0, at);
    uint64_t tag = class_tag(tname);
    memcpy(p + at, &tag, sizeof tag);
    if (luaL_getmetatable(L, tname) != LUA_TTABLE) /* the registry is the host's to change */
        luaL_error(L, "the class %s was taken out of the registry (debug.getregistry)", tname);
    lua_setmetatable(L, -2);
    return p;
}

bool klua_has_tag(lua_State *L, int idx, const void *p, const char *tname) {
    size_t len = lua_rawlen(L, idx);
    if (!p || len < sizeof(uint64_t) || len % 8 != 0) return false;
    uint64_t tag;
    memcpy(&tag, (const uint8_t *)p + len - sizeof tag, sizeof tag);
    return tag == class_tag(tname);
}

void *klua_toobject(lua_State *L, int idx, const char *tname) {
    void *p = lua_type(L, idx) == LUA_TUSERDATA ? lua_touserdata(L, idx) : NULL;
    return p && klua_has_tag(L, idx, p, tname) ? p : NULL;
}

void *klua_testudata(lua_State *L, int idx, const char *tname) {
    void *p = luaL_testudata(L, idx, tname);
    return p && klua_has_tag(L, idx, p, tname) ? p : NULL;
}

/* What a message says the value at idx is: its class (__name) or its type; a userdata that
 * wears a kiln class's metatable without being of the class says so. */
static const char *got_name(lua_State *L, int idx) {
    const char *got = luaL_typename(L, idx);
    if (luaL_getmetafield(L, idx, "__name") != LUA_TSTRING) return got;
    got = lua_tostring(L, -1);
    if (lua_type(L, idx) == LUA_TUSERDATA && strncmp(got, "kiln.", 5) == 0 && strlen(got) >= 8 &&
        !klua_has_tag(L, idx, lua_touserdata(L, idx), got))
        got = lua_pushfstring(L, "a userdata with the metatable of %s", got);
    return got;
}

void *klua_checkudata(lua_State *L, int idx, const char *tname) {
    void *p = klua_testudata(L, idx, tname);
    if (!p) luaL_argerror(L, idx, lua_pushfstring(L, "%s expected, got %s", tname, got_name(L, idx)));
    return p;
}

void klua_claim_class(lua_State *L, const char *tname) {
    if (strlen(tname) < 8) luaL_error(L, "kiln: class name %s is shorter than its tag (8 bytes)", tname);
    lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_CLASSES);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, KLUA_REG_CLASSES);
    }
    lua_pushlstring(L, tname, 8);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    const char *other = lua_tostring(L, -1);
    if (other && strcmp(other, tname) != 0)
        luaL_error(L, "kiln: classes %s and %s share a tag (the first 8 bytes of their names)", other, tname);
    lua_pop(L, 1);
    lua_pushstring(L, tname);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

void klua_createmeta(lua_State *L, const char *tname, const luaL_Reg *methods,
                     const luaL_Reg *metamethods) {
    klua_claim_class(L, tname);
    luaL_newmetatable(L, tname);
    if (metamethods) luaL_setfuncs(L, metamethods, 0);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__index");
    klua_push_public_meta(L, tname, -1);
    lua_setfield(L, -3, "__metatable");
    lua_pop(L, 2);
    if (methods) klua_addmethods(L, tname, methods);
}

void klua_addmethods(lua_State *L, const char *tname, const luaL_Reg *methods) {
    luaL_getmetatable(L, tname);
    lua_getfield(L, -1, "__index");
    lua_pushvalue(L, -2);
    luaL_setfuncs(L, methods, 1); /* upvalue KLUA_UPV_META: see klua_self */
    lua_pop(L, 2);
}

/* ---- the World behind a method --------------------------------------------------------- */

lua_State *klua_main_thread(lua_State *L) {
#if KLUA_LUAJIT
    return klua_compat_main_thread(L); /* the thread luaopen_kiln remembered (compat.h) */
#else
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *main = lua_tothread(L, -1);
    lua_pop(L, 1);
    return main;
#endif
}

klua_world *klua_check_world(lua_State *L, int idx) {
    klua_world *kw = klua_testudata(L, idx, KLUA_WORLD);
    if (!kw) klua_typeerror(L, idx, "kiln", KLUA_WORLD);
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    return kw;
}

kiln_world *kiln_lua_check_world(lua_State *L, int idx) { return klua_check_world(L, idx)->world; }

/* Raises "calling 'class:method' on bad self (tname expected, got ...)", the method named as the
 * caller called it. */
/* The running method's name: its key in the method table of class tname (the metatable's
 * __index), since a call through t[m] or a local copy has no name at the call site to go by
 * (`local f = w.despawn; f(5)` named it 'f'); else the name it was given when a Lua function
 * replaced it there (klua_name_replaced); else the call site's name, else "?". Leaves
 * what it pushed on the stack (an error is raised next). */
static const char *method_name(lua_State *L, const char *tname) {
    lua_Debug ar;
    if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "fn", &ar)) return "?";
    int fn = lua_gettop(L);
    luaL_getmetatable(L, tname);
    if (lua_istable(L, -1) && lua_getfield(L, -1, "__index") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, fn)) return lua_tostring(L, -2);
            lua_pop(L, 1);
        }
    }
    lua_settop(L, fn);
    /* a method a Lua function replaced (klua_name_replaced); the registry is the host's to
     * change (debug.getregistry), so nothing is assumed of what lies there */
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_REPLACED) == LUA_TTABLE) {
        lua_pushvalue(L, fn);
        if (lua_rawget(L, -2) == LUA_TSTRING) return lua_tostring(L, -1);
    }
    return ar.name ? ar.name : "?";
}

void klua_name_replaced(lua_State *L, int fn_idx, const char *name) {
    fn_idx = lua_absindex(L, fn_idx);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, KLUA_REG_REPLACED);
    lua_pushvalue(L, fn_idx);
    lua_pushstring(L, name);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

static void self_error(lua_State *L, const char *tname, const char *class) {
    const char *got = got_name(L, 1);
    const char *fname = lua_pushfstring(L, "%s:%s", class, method_name(L, tname));
    klua_argerror(L, 1, fname, "%s expected, got %s", tname, got);
}

void *klua_check_self(lua_State *L, const char *tname, const char *class) {
    void *p = klua_testudata(L, 1, tname);
    if (!p) self_error(L, tname, class);
    return p;
}

klua_world *klua_self_plain(lua_State *L) {
    klua_world *kw = lua_touserdata(L, 1);
    if (!kw || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(KLUA_UPV_META)) ||
        !klua_has_tag(L, 1, kw, KLUA_WORLD))
        self_error(L, KLUA_WORLD, "world");
    lua_pop(L, 1);
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    return kw;
}

#define GC_PAYBACK (64 * 1024)

static int64_t heap_bytes(lua_State *L) {
    return (int64_t)lua_gc(L, LUA_GCCOUNT) * 1024 + lua_gc(L, LUA_GCCOUNTB);
}

void klua_release_gc(lua_State *L, klua_world *kw) {
    if (!kw->gc_held) return;
    kw->gc_held = false;
    int64_t grown = heap_bytes(L) - kw->gc_held_bytes;
    lua_gc(L, LUA_GCRESTART);
    if (grown > 0) kw->gc_owed_bytes += grown;
    /* Paid back in steps of at least GC_PAYBACK: an incremental step does a fixed amount of
     * work (about its step size, 8 KiB by default), so smaller steps would overpay. */
    if (kw->gc_owed_bytes >= GC_PAYBACK) {
        /* the work the collector would have done for these allocations */
        int kib = kw->gc_owed_bytes > (int64_t)1 << 40 ? 1 << 30 : (int)(kw->gc_owed_bytes / 1024);
        kw->gc_owed_bytes -= (int64_t)kib * 1024;
        lua_gc(L, LUA_GCSTEP, kib);
    }
}

static int gc_guard_close(lua_State *L) {
    klua_world **guard = klua_toobject(L, 1, KLUA_GC_GUARD); /* debug.getmetatable reaches it */
    if (guard && *guard) klua_release_gc(L, *guard);
    return 0;
}

/* The guard's metatable, made once per state and published in the registry only when whole:
 * a metatable left there without __close (memory ran out between) would make every held
 * method of every world of the state raise "got a non-closable value", for good. */
static void gc_guard_class(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, KLUA_GC_GUARD);
    bool made = lua_istable(L, -1);
    lua_pop(L, 1);
    if (made) return;
    klua_claim_class(L, KLUA_GC_GUARD); /* may be claimed again: a retry after a refusal */
    lua_createtable(L, 0, 2);
    lua_pushstring(L, KLUA_GC_GUARD);
    lua_setfield(L, -2, "__name");
    lua_pushcfunction(L, gc_guard_close);
    lua_setfield(L, -2, "__close");
    lua_setfield(L, LUA_REGISTRYINDEX, KLUA_GC_GUARD);
}

int klua_new_gc_guard(lua_State *L, klua_world *kw) {
    gc_guard_class(L);
    klua_world **guard = klua_newobject(L, sizeof *guard, 0, KLUA_GC_GUARD);
    *guard = kw;
    return klua_ref(L, LUA_REGISTRYINDEX);
}

void klua_names_changed(lua_State *L) {
    luaL_error(L, "a World's component names were taken out of the registry (debug.getregistry)");
    for (;;) {
    }
}

#if !KLUA_LUAJIT
static int frame_probe(lua_State *L) {
    (void)L;
    return 0;
}
#endif

void klua_hold_gc(lua_State *L, klua_world *kw) {
    if (kw->gc_held || !lua_gc(L, LUA_GCISRUNNING)) return; /* held already, or the host's */
    lua_gc(L, LUA_GCSTOP); /* first: no collector step, so no finalizer, from here on (3a) */
#if !KLUA_LUAJIT /* LuaJIT: the method's closure ends the hold (jit_methods.c) */
    /* The guard's __close is a call, made as the method returns (after its work has landed)
     * or raises. A call made now from this frame makes that call's frame (a CallInfo and
     * the stack a C function gets), so running out of memory for it raises here, before the
     * method touches the world, and the guard's close always finds its frame. */
    lua_pushcfunction(L, frame_probe);
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
        lua_gc(L, LUA_GCRESTART);
        lua_error(L);
    }
    klua_getref(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    lua_toclose(L, -1);
#endif
    kw->gc_held = true;
    kw->gc_held_bytes = heap_bytes(L);
}

klua_world *klua_self(lua_State *L) {
    klua_world *kw = klua_self_plain(L);
    /* Absent arguments read as nil, never as the guard pushed above them. */
    if (lua_gettop(L) < KLUA_ARG_PAD) lua_settop(L, KLUA_ARG_PAD);
    klua_hold_gc(L, kw);
    return kw;
}

klua_world *klua_self_unheld(lua_State *L) {
    klua_world *kw = klua_self_plain(L);
    if (lua_gettop(L) < KLUA_ARG_PAD) lua_settop(L, KLUA_ARG_PAD);
    return kw;
}

uint8_t *klua_scratch(lua_State *L, klua_world *kw, size_t size) {
    if (size + 16 > kw->scratch_size) {
        size_t n = kw->scratch_size ? kw->scratch_size : 256;
        while (n < size + 16) n *= 2;
        void *ud;
        lua_Alloc fa = lua_getallocf(L, &ud);
        size_t old_shift = (16 - (uintptr_t)kw->scratch % 16) % 16;
        uint8_t *p = fa(ud, kw->scratch, kw->scratch_size, n);
        if (!p) klua_no_memory(L);
        /* The allocator may align the grown block otherwise (LuaJIT's gives 8-byte blocks):
         * the bytes move with the aligned start, so a caller growing it mid-conversion keeps
         * what it wrote (spawn's fast path). */
        size_t new_shift = (16 - (uintptr_t)p % 16) % 16;
        if (kw->scratch_size > old_shift + 16 && new_shift != old_shift)
            memmove(p + new_shift, p + old_shift, kw->scratch_size - 16);
        kw->scratch = p;
        kw->scratch_size = n;
    }
    return (uint8_t *)(((uintptr_t)kw->scratch + 15) & ~(uintptr_t)15);
}

void klua_push_self(lua_State *L, klua_world *kw) {
    if (kw->progress_idx) {
        lua_pushvalue(L, kw->progress_idx);
        return;
    }
    /* nil unless the entry is kw's own World: the registry is the host's to change */
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_WORLDS) == LUA_TTABLE) lua_rawgetp(L, -1, kw);
    else lua_pushnil(L);
    lua_remove(L, -2);
    if (lua_type(L, -1) != LUA_TUSERDATA || lua_touserdata(L, -1) != kw) { /* else kw's own */
        lua_pop(L, 1);
        lua_pushnil(L);
    }
}

bool klua_push_state(lua_State *L, int world_idx, const char *key) {
    world_idx = lua_absindex(L, world_idx);
    if (lua_type(L, world_idx) != LUA_TUSERDATA) {
        lua_pushnil(L);
        return false;
    }
    if (lua_getiuservalue(L, world_idx, KLUA_WORLD_UV_STATE) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return false;
    }
    lua_pushstring(L, key);
    bool found = lua_rawget(L, -2) == LUA_TTABLE;
    lua_remove(L, -2);
    if (!found) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    return found;
}

kiln_schedule *klua_schedule(lua_State *L, klua_world *kw) {
    if (kw->schedule) return kw->schedule;
    if (kw->workers > 0 && !kw->jobs) {
        kw->jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = kw->workers});
        if (!kw->jobs) luaL_error(L, "kiln: cannot start %d worker threads", (int)kw->workers);
    }
    kw->schedule = kiln_schedule_create(kw->world, &(kiln_schedule_desc){.jobs = kw->jobs});
    if (!kw->schedule) klua_no_memory(L);
    return kw->schedule;
}

kiln_schedule *kiln_lua_schedule(lua_State *L, int idx) {
    return klua_schedule(L, klua_check_world(L, idx));
}

/* ---- look-ups ------------------------------------------------------------------------------ */

const char *klua_entity_str(kiln_entity e, char *buf) { return kiln_entity_format(e, buf, 24); }

#define FLAG_LUA_VALUED 1
#define FLAG_HOST_DECLARED 2
#define FLAG_MOD_REGISTERED 4

static bool own_lua_valued(const klua_world *kw, kiln_component c) {
    return c < (kiln_component)kw->lua_valued_cap && (kw->lua_valued[c] & FLAG_LUA_VALUED);
}

bool klua_host_declared(const klua_world *kw, kiln_component c) {
    return c < (kiln_component)kw->lua_valued_cap && (kw->lua_valued[c] & FLAG_HOST_DECLARED);
}

bool klua_mod_registered(const klua_world *kw, kiln_component c) {
    return c < (kiln_component)kw->lua_valued_cap && (kw->lua_valued[c] & FLAG_MOD_REGISTERED);
}

void klua_mark_mod_registered(klua_world *kw, kiln_component c) {
    if (c < (kiln_component)kw->lua_valued_cap) kw->lua_valued[c] |= FLAG_MOD_REGISTERED;
}

bool klua_is_lua_valued(const klua_world *kw, kiln_component c) {
    return own_lua_valued(kw, c) || (kw->host && own_lua_valued(kw->host, c));
}

/* What a mod's view may not name: the host's Lua-valued components (their values live in
 * the host's state) and kiln's own bookkeeping components (names starting "kiln."). Pushes
 * and returns why c is one of them for view kw, or returns NULL (pushing nothing). */
const char *klua_unreachable(lua_State *L, const klua_world *kw, kiln_component c) {
    if (!kw->host) return NULL;
    kiln_component_info info;
    if (!kiln_component_info_get(kw->world, c, &info)) return NULL;
    if (strncmp(info.name, "kiln.", 5) == 0)
        return lua_pushfstring(L, "component '%s' is kiln's own; mods cannot use it", info.name);
    if (own_lua_valued(kw->host, c))
        return lua_pushfstring(L, "component '%s' holds Lua values of the host, which mods cannot reach", info.name);
    return NULL;
}

static void check_reachable(lua_State *L, klua_world *kw, kiln_component c, int arg, const char *fname) {
    const char *why = klua_unreachable(L, kw, c);
    if (why) klua_argerror(L, arg, fname, "%s", why);
}

/* Makes room for c's flags with the allocator of L (kw's state); false when it refuses. */
bool klua_flags_room(lua_State *L, klua_world *kw, kiln_component c) {
    if (c >= (kiln_component)kw->lua_valued_cap) {
        int32_t ncap = kw->lua_valued_cap ? kw->lua_valued_cap : 64;
        while ((kiln_component)ncap <= c) ncap *= 2;
        void *ud;
        lua_Alloc fa = lua_getallocf(L, &ud);
        uint8_t *p = fa(ud, kw->lua_valued, (size_t)kw->lua_valued_cap, (size_t)ncap);
        if (!p) return false;
        memset(p + kw->lua_valued_cap, 0, (size_t)(ncap - kw->lua_valued_cap));
        kw->lua_valued = p;
        kw->lua_valued_cap = ncap;
    }
    return true;
}

static void mark(lua_State *L, klua_world *kw, kiln_component c, uint8_t flag) {
    if (!klua_flags_room(L, kw, c)) klua_no_memory(L);
    kw->lua_valued[c] |= flag;
}

void klua_mark_lua_valued(lua_State *L, klua_world *kw, kiln_component c) { mark(L, kw, c, FLAG_LUA_VALUED); }

void klua_mark_host_declared(lua_State *L, klua_world *kw, kiln_component c) { mark(L, kw, c, FLAG_HOST_DECLARED); }

kiln_entity klua_check_entity(lua_State *L, int arg, const char *fname) {
    int ok = 0;
    lua_Integer v = lua_type(L, arg) == LUA_TNUMBER ? lua_tointegerx(L, arg, &ok) : 0;
    if (!ok) klua_typeerror(L, arg, fname, "entity");
    if (v < 0) klua_argerror(L, arg, fname, "entity expected, got a negative number");
    return (kiln_entity)v;
}

void klua_check_alive(lua_State *L, klua_world *kw, kiln_entity e, const char *fname) {
    char eb[24];
    if (e == KILN_NULL_ENTITY) klua_fail(L, fname, "entity is null"); /* as the core says it */
    if (!kiln_is_alive(kw->world, e)) klua_fail(L, fname, "entity %s is not alive", klua_entity_str(e, eb));
}

#define NAME_SLOT(p) ((unsigned)(((uintptr_t)(p) >> 4) ^ ((uintptr_t)(p) >> 10)) % KLUA_NAME_CACHE)

/* Whether idx holds a component id: an integer, or a float with an integral value (5.0), as
 * entities are taken and as LuaJIT, whose numbers are all floats, takes them; never a string. */
static bool component_number(lua_State *L, int idx, lua_Integer *v) {
    int ok = 0;
    *v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
    return ok != 0;
}

kiln_component klua_component_quiet(lua_State *L, klua_world *kw, int idx, const char *s, size_t n) {
    if (s) {
        unsigned slot = NAME_SLOT(s);
        if (kw->name_ptr[slot] == s) return kw->name_id[slot];
        kiln_component c = klua_name_ok(s, n) ? kiln_component_lookup(kw->world, s) : KILN_NO_COMPONENT;
        return c == kw->shared_type ? KILN_NO_COMPONENT : c;
    }
    lua_Integer v;
    if (!component_number(L, idx, &v)) return KILN_NO_COMPONENT;
    if (v <= 0 || v > kiln_component_count(kw->world) || (kiln_component)v == kw->shared_type)
        return KILN_NO_COMPONENT;
    return (kiln_component)v;
}

kiln_component klua_check_component(lua_State *L, klua_world *kw, int idx, int arg, const char *fname) {
    kiln_component c = KILN_NO_COMPONENT;
    lua_Integer v;
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TSTRING) {
        /* A short string is interned: its bytes' address names it while it lives, and once
         * it is a key of the names table below it lives as long as the world. */
        size_t len;
        const char *str = lua_tolstring(L, idx, &len);
        unsigned slot = NAME_SLOT(str);
        if (kw->name_ptr[slot] == str) return kw->name_id[slot];
        /* interned name -> id, cached per world (ids never change) */
        if (klua_getref(L, LUA_REGISTRYINDEX, kw->names_ref) != LUA_TTABLE) klua_names_changed(L);
        lua_pushvalue(L, idx);
        if (lua_rawget(L, -2) == LUA_TNUMBER) {
            c = (kiln_component)lua_tointeger(L, -1);
            lua_pop(L, 2);
        } else {
            lua_pop(L, 1);
            size_t n;
            const char *s = lua_tolstring(L, idx, &n);
            c = klua_name_ok(s, n) ? kiln_component_lookup(kw->world, s) : KILN_NO_COMPONENT;
            if (!c || c == kw->shared_type) {
                klua_argerror(L, arg, fname, "unknown component '%s'", klua_quote(L, s, n));
            }
            check_reachable(L, kw, c, arg, fname);
            lua_pushvalue(L, idx);
            lua_pushinteger(L, c);
            lua_rawset(L, -3);
            lua_pop(L, 1);
        }
        if (len <= KLUA_SHORT_STRING) {
            kw->name_ptr[slot] = str;
            kw->name_id[slot] = c;
        }
    } else if (component_number(L, idx, &v)) {
        if (v <= 0 || v > kiln_component_count(kw->world) || (kiln_component)v == kw->shared_type)
            klua_argerror(L, arg, fname, "unknown component #%I", v);
        c = (kiln_component)v;
        check_reachable(L, kw, c, arg, fname);
    } else {
        if (idx == arg) klua_typeerror(L, arg, fname, "component name");
        klua_argerror(L, arg, fname, "component name expected, got %s", luaL_typename(L, idx));
    }
    return c;
}
