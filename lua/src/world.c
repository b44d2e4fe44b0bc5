/* world.c: the kiln.World class: entities, components defined from Lua or C, access by
 * name, ticks, hierarchy, events and resources. Every method checks all of its arguments
 * (and converts every value) before it touches the world, so an error leaves nothing
 * half-done. */
#include <stdlib.h>
#include <string.h>

#include "kiln_transform.h"
#include "klua.h"

#define SCRATCH_MAX 64 /* components in one spawn */

const char *klua_entity_str(kiln_entity e, char *buf) { return kiln_entity_format(e, buf, 24); }

lua_State *klua_main_thread(lua_State *L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *main = lua_tothread(L, -1);
    lua_pop(L, 1);
    return main;
}

static klua_world *to_world(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, KLUA_WORLD);
}

klua_world *klua_check_world(lua_State *L, int idx) {
    klua_world *kw = to_world(L, idx);
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    return kw;
}

kiln_world *kiln_lua_check_world(lua_State *L, int idx) { return klua_check_world(L, idx)->world; }

klua_world *klua_self_plain(lua_State *L) {
    klua_world *kw = lua_touserdata(L, 1);
    if (!kw || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
        return klua_check_world(L, 1); /* raises the usual type error */
    lua_pop(L, 1);
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    return kw;
}

static int gc_guard_close(lua_State *L) {
    klua_world *kw = *(klua_world **)lua_touserdata(L, 1);
    if (kw && kw->gc_held) {
        kw->gc_held = false;
        lua_gc(L, LUA_GCRESTART);
    }
    return 0;
}

void klua_hold_gc(lua_State *L, klua_world *kw) {
    if (kw->gc_held || !lua_gc(L, LUA_GCISRUNNING)) return; /* held already, or the host's */
    lua_rawgeti(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    lua_toclose(L, -1);
    lua_gc(L, LUA_GCSTOP);
    kw->gc_held = true;
}

klua_world *klua_self(lua_State *L) {
    klua_world *kw = klua_self_plain(L);
    /* Absent arguments read as nil, never as the guard pushed above them. */
    if (lua_gettop(L) < 6) lua_settop(L, 6);
    klua_hold_gc(L, kw);
    return kw;
}

uint8_t *klua_scratch(lua_State *L, klua_world *kw, size_t size) {
    if (size + 16 > kw->scratch_size) {
        size_t n = kw->scratch_size ? kw->scratch_size : 256;
        while (n < size + 16) n *= 2;
        void *ud;
        lua_Alloc fa = lua_getallocf(L, &ud);
        uint8_t *p = fa(ud, kw->scratch, kw->scratch_size, n);
        if (!p) luaL_error(L, "out of memory");
        kw->scratch = p;
        kw->scratch_size = n;
    }
    return (uint8_t *)(((uintptr_t)kw->scratch + 15) & ~(uintptr_t)15);
}

bool klua_is_lua_valued(const klua_world *kw, kiln_component c) {
    return c < (kiln_component)kw->lua_valued_cap && kw->lua_valued[c];
}

kiln_entity klua_check_entity(lua_State *L, int arg, const char *fname) {
    int ok = 0;
    lua_Integer v = lua_type(L, arg) == LUA_TNUMBER ? lua_tointegerx(L, arg, &ok) : 0;
    if (!ok || v < 0)
        luaL_error(L, "%s: entity must be a non-negative integer, got %s", fname,
                   ok ? "a negative number" : luaL_typename(L, arg));
    return (kiln_entity)v;
}

kiln_component klua_check_component(lua_State *L, klua_world *kw, int arg, const char *fname) {
    kiln_component c = KILN_NO_COMPONENT;
    if (lua_type(L, arg) == LUA_TSTRING) {
        /* interned name -> id, cached per world (ids never change) */
        arg = lua_absindex(L, arg);
        lua_rawgeti(L, LUA_REGISTRYINDEX, kw->names_ref);
        lua_pushvalue(L, arg);
        if (lua_rawget(L, -2) == LUA_TNUMBER) {
            c = (kiln_component)lua_tointeger(L, -1);
            lua_pop(L, 2);
        } else {
            lua_pop(L, 1);
            c = kiln_component_lookup(kw->world, lua_tostring(L, arg));
            if (!c) luaL_error(L, "%s: unknown component '%s'", fname, lua_tostring(L, arg));
            lua_pushvalue(L, arg);
            lua_pushinteger(L, c);
            lua_rawset(L, -3);
            lua_pop(L, 1);
        }
    } else if (lua_isinteger(L, arg)) {
        lua_Integer v = lua_tointeger(L, arg);
        if (v <= 0 || v > kiln_component_count(kw->world))
            luaL_error(L, "%s: unknown component #%I", fname, v);
        c = (kiln_component)v;
    } else {
        luaL_error(L, "%s: component must be a name, got %s", fname, luaL_typename(L, arg));
    }
    if (c == kw->shared_type) luaL_error(L, "%s: component '%s' is internal to kiln", fname, lua_tostring(L, arg));
    return c;
}

/* Raises unless e is alive. */
static void check_alive(lua_State *L, klua_world *kw, kiln_entity e, const char *fname) {
    char eb[24];
    if (!kiln_is_alive(kw->world, e)) luaL_error(L, "%s: entity %s is not alive", fname, klua_entity_str(e, eb));
}

static void raise_world(lua_State *L, klua_world *kw, const char *fname) {
    luaL_error(L, "%s: %s", fname, kiln_world_error(kw->world));
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static void release(lua_State *L, klua_world *kw) {
    if (kw->closed) return;
    kiln_schedule_destroy(kw->schedule);
    kw->schedule = NULL;
    int values_ref = kw->shared ? kw->shared->values_ref : LUA_NOREF;
    if (kw->owned) {
        kiln_world_destroy(kw->world); /* Lua-valued hooks still see L here */
    } else if (kw->shared) {
        kw->shared->L = NULL; /* the host keeps the world; its Lua values die with us */
    }
    luaL_unref(L, LUA_REGISTRYINDEX, values_ref);
    kiln_jobs_destroy(kw->jobs);
    kw->jobs = NULL;
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    if (kw->lua_valued) {
        fa(ud, kw->lua_valued, (size_t)kw->lua_valued_cap, 0);
        kw->lua_valued = NULL;
    }
    if (kw->scratch) {
        fa(ud, kw->scratch, kw->scratch_size, 0);
        kw->scratch = NULL;
        kw->scratch_size = 0;
    }
    luaL_unref(L, LUA_REGISTRYINDEX, kw->names_ref);
    kw->names_ref = LUA_NOREF;
    /* the guard may still sit in a closing slot: it must not point at a dead world */
    lua_rawgeti(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    *(klua_world **)lua_touserdata(L, -1) = NULL;
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    kw->gc_guard_ref = LUA_NOREF;
    if (kw->gc_held) {
        kw->gc_held = false;
        lua_gc(L, LUA_GCRESTART);
    }
    kw->world = NULL;
    kw->closed = true;
}

static int w_close(lua_State *L) {
    klua_world *kw = to_world(L, 1);
    if (!kw->closed && (kw->current || kiln_is_deferred(kw->world)))
        return luaL_error(L, "world:close: cannot close the world while a query iterates or a system runs");
    release(L, kw);
    return 0;
}

static int w_gc(lua_State *L) {
    klua_world *kw = to_world(L, 1);
    release(L, kw);
    return 0;
}

static int w_tostring(lua_State *L) {
    klua_world *kw = to_world(L, 1);
    if (kw->closed) lua_pushstring(L, "kiln.World (closed)");
    else lua_pushfstring(L, "kiln.World (%I entities)", (lua_Integer)kiln_entity_count(kw->world));
    return 1;
}

static void shared_destroy(void *ptr, int32_t count, void *ctx) {
    (void)ptr;
    (void)count;
    (void)ctx; /* the registry table itself is collected with the Lua state */
}

int klua_new_world(lua_State *L, kiln_world *world, bool owned, int32_t workers) {
    klua_world *kw = lua_newuserdatauv(L, sizeof *kw, 1);
    memset(kw, 0, sizeof *kw);
    kw->world = world;
    kw->owned = owned;
    kw->workers = workers;
    kw->max_failures = 0;
    luaL_setmetatable(L, KLUA_WORLD);
    lua_newtable(L); /* state: values, resources, systems */
    lua_newtable(L);
    lua_setfield(L, -2, "resources");
    lua_newtable(L);
    lua_setfield(L, -2, "systems");
    lua_setiuservalue(L, -2, 1);

    /* The shared block lives in the world as a resource, so hooks can outlive Lua. */
    kiln_component_desc sd = {.name = "kiln.lua", .size = sizeof(klua_shared),
                              .destroy = shared_destroy};
    kiln_result r = kiln_component_register(world, &sd, &kw->shared_type);
    if (r == KILN_OK && !kiln_resource_has(world, kw->shared_type))
        r = kiln_resource_set(world, kw->shared_type, &(klua_shared){NULL, LUA_NOREF});
    if (r != KILN_OK) {
        if (owned) kiln_world_destroy(world);
        kw->closed = true;
        kw->world = NULL;
        return luaL_error(L, "kiln.world: %s", kiln_world_error(world));
    }
    kw->shared = kiln_resource_get(world, kw->shared_type);
    lua_newtable(L);
    kw->shared->values_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    kw->shared->L = klua_main_thread(L); /* a coroutine that made the world may die first */
    lua_newtable(L);
    kw->names_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    klua_world **guard = lua_newuserdatauv(L, sizeof *guard, 0);
    *guard = kw;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, gc_guard_close);
    lua_setfield(L, -2, "__close");
    lua_setmetatable(L, -2);
    kw->gc_guard_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    kiln_transform_init(world, NULL);
    /* A weak registry entry finds this userdata from C callbacks (systems run by a host's
     * kiln_schedule_run) without keeping the world alive. */
    if (luaL_getsubtable(L, LUA_REGISTRYINDEX, "kiln.worlds") == 0) {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, "v");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
    }
    lua_pushlightuserdata(L, kw);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
}

void klua_push_self(lua_State *L, klua_world *kw) {
    if (kw->progress_idx) {
        lua_pushvalue(L, kw->progress_idx);
        return;
    }
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.worlds");
    lua_rawgetp(L, -1, kw);
    lua_remove(L, -2);
}

static int w_new(lua_State *L) {
    int32_t workers = 0;
    int32_t max_failures = 0;
    bool transforms = false;
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_pushstring(L, "workers");
        lua_rawget(L, 1);
        if (!lua_isnil(L, -1)) {
            int ok;
            lua_Integer w = lua_tointegerx(L, -1, &ok);
            if (!ok || w < 0 || w > 64) luaL_error(L, "kiln.world: workers must be an integer from 0 to 64");
            workers = (int32_t)w;
        }
        lua_pushstring(L, "max_failures");
        lua_rawget(L, 1);
        if (!lua_isnil(L, -1)) {
            int ok;
            lua_Integer m = lua_tointegerx(L, -1, &ok);
            if (!ok || m < 0) luaL_error(L, "kiln.world: max_failures must be a non-negative integer");
            max_failures = (int32_t)m;
        }
        lua_pushstring(L, "transforms");
        lua_rawget(L, 1);
        transforms = lua_toboolean(L, -1);
        lua_pop(L, 3);
    }
    kiln_world *world = kiln_world_create(NULL);
    if (!world) return luaL_error(L, "kiln.world: out of memory");
    klua_new_world(L, world, true, workers);
    klua_world *kw = to_world(L, -1);
    kw->max_failures = max_failures;
    if (transforms) {
        /* the C propagation system, first in the schedule */
        kiln_system_desc d;
        kiln_transform_system_desc(world, &d);
        if (kiln_schedule_add(klua_schedule(L, kw), &d) != KILN_OK)
            return luaL_error(L, "kiln.world: %s", kiln_world_error(world));
    }
    return 1;
}

/* ---- components ------------------------------------------------------------------------ */

static void mark_lua_valued(lua_State *L, klua_world *kw, kiln_component c) {
    if (c >= (kiln_component)kw->lua_valued_cap) {
        int32_t ncap = kw->lua_valued_cap ? kw->lua_valued_cap : 64;
        while ((kiln_component)ncap <= c) ncap *= 2;
        void *ud;
        lua_Alloc fa = lua_getallocf(L, &ud);
        uint8_t *p = fa(ud, kw->lua_valued, (size_t)kw->lua_valued_cap, (size_t)ncap);
        if (!p) luaL_error(L, "out of memory");
        memset(p + kw->lua_valued_cap, 0, (size_t)(ncap - kw->lua_valued_cap));
        kw->lua_valued = p;
        kw->lua_valued_cap = ncap;
    }
    kw->lua_valued[c] = 1;
}

/* Registers from a schema string (or nil: a tag, "lua": Lua values) under name; used for
 * components and event types. Returns the id. */
static uint32_t define(lua_State *L, klua_world *kw, bool event, const char *fname) {
    const char *name = luaL_checkstring(L, 2);
    const char *schema = luaL_optstring(L, 3, "");
    kiln_field fields[KILN_MAX_FIELDS];
    char names[KILN_MAX_FIELDS * (KILN_MAX_NAME + 1)];
    kiln_component_desc d = {.name = name};
    bool lua_valued = strcmp(schema, "lua") == 0;
    if (lua_valued) {
        if (event) luaL_error(L, "%s: event %s cannot hold Lua values; give it a C schema", fname, name);
        d.size = sizeof(int32_t);
        d.destroy = klua_value_hook;
        d.hook_ctx = kw->shared;
    } else {
        size_t size, align;
        int n = klua_parse_schema(L, schema, fields, names, sizeof names, &size, &align);
        if (n < 0) luaL_error(L, "%s: %s: %s", fname, name, lua_tostring(L, -1));
        d.size = size;
        d.align = size ? align : 0;
        d.fields = fields;
        d.field_count = n;
    }
    uint32_t id;
    kiln_event_type type = {0};
    kiln_result r = event ? kiln_event_register(kw->world, &d, &type)
                          : kiln_component_register(kw->world, &d, &id);
    if (event) id = type.id;
    if (r != KILN_OK) raise_world(L, kw, fname);
    if (lua_valued) mark_lua_valued(L, kw, id);
    return id;
}

static int w_component(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, define(L, kw, false, "world:component"));
    return 1;
}

/* Converts value (at idx) for component c into buf; for Lua-valued components takes a ref
 * (written to buf) that the caller must release if it does not hand buf to the world. */
static void build_value(lua_State *L, klua_world *kw, kiln_component c, int idx, void *buf,
                        const kiln_component_info *info, const char *fname, kiln_entity e) {
    if (klua_is_lua_valued(kw, c)) {
        int32_t ref = klua_value_ref(L, kw, idx);
        memcpy(buf, &ref, sizeof ref);
        return;
    }
    if (info->size) memset(buf, 0, info->size);
    if (info->size == 0) {
        if (!lua_isnoneornil(L, idx) && !(lua_isboolean(L, idx) && lua_toboolean(L, idx)))
            luaL_error(L, "%s: %s is a tag; give true or nothing, not %s", fname, info->name,
                       lua_isboolean(L, idx) ? "false" : luaL_typename(L, idx));
        return;
    }
    if (lua_isnoneornil(L, idx)) return;
    if (info->field_count == 0)
        luaL_error(L, "%s: %s has no reflected fields to set from Lua", fname, info->name);
    klua_read_fields(L, idx, info, buf, fname, e);
}

static void unref_value(lua_State *L, klua_world *kw, kiln_component c, const void *buf) {
    if (!klua_is_lua_valued(kw, c)) return;
    int32_t ref;
    memcpy(&ref, buf, sizeof ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, kw->shared->values_ref);
    luaL_unref(L, -1, ref);
    lua_pop(L, 1);
}

/* ---- entities ---------------------------------------------------------------------------- */

static int w_spawn(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:spawn";
    kiln_component comps[SCRATCH_MAX];
    int32_t n = 0;
    size_t total = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (n == SCRATCH_MAX) luaL_error(L, "%s: at most %d components at once", fname, SCRATCH_MAX);
            lua_pushvalue(L, -2);
            comps[n] = klua_check_component(L, kw, -1, fname);
            lua_pop(L, 2);
            klua_check_access(L, kw, comps[n], true, fname);
            kiln_component_info info;
            kiln_component_info_get(kw->world, comps[n], &info);
            total += (info.size + 15) & ~(size_t)15;
            n++;
        }
    }
    /* Values: converted into one scratch block (a userdata, so an error frees it). */
    uint8_t *base = total ? klua_scratch(L, kw, total) : NULL;
    const void *values[SCRATCH_MAX];
    size_t off = 0;
    /* Data values first (they may raise); Lua values take refs last, when nothing can fail. */
    for (int pass = 0; pass < 2; pass++) {
        off = 0;
        for (int32_t i = 0; i < n; i++) {
            kiln_component_info info;
            kiln_component_info_get(kw->world, comps[i], &info);
            values[i] = base + off;
            if (klua_is_lua_valued(kw, comps[i]) == (pass == 1)) {
                lua_pushstring(L, info.name);
                lua_rawget(L, 2);
                build_value(L, kw, comps[i], -1, base + off, &info, fname, 0);
                lua_pop(L, 1);
            }
            off += (info.size + 15) & ~(size_t)15;
        }
    }
    kiln_entity e;
    kiln_result r = kiln_spawn_with(kw->world, comps, values, n, &e);
    if (r != KILN_OK) {
        for (int32_t i = 0; i < n; i++) unref_value(L, kw, comps[i], values[i]);
        raise_world(L, kw, fname);
    }
    lua_pushinteger(L, (lua_Integer)e);
    return 1;
}

static int w_despawn(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_entity e = klua_check_entity(L, 2, "world:despawn");
    if (kiln_despawn(kw->world, e) != KILN_OK) raise_world(L, kw, "world:despawn");
    return 0;
}

static int w_is_alive(lua_State *L) {
    klua_world *kw = klua_self(L);
    int ok = 0;
    lua_Integer v = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
    lua_pushboolean(L, ok && v > 0 && kiln_is_alive(kw->world, (kiln_entity)v));
    return 1;
}

static int w_count(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, (lua_Integer)kiln_entity_count(kw->world));
    return 1;
}

static int w_entities(lua_State *L) {
    klua_world *kw = klua_self(L);
    int64_t n = kiln_world_entities(kw->world, NULL, 0);
    kiln_entity *list = lua_newuserdatauv(L, sizeof(kiln_entity) * (size_t)(n ? n : 1), 0);
    kiln_world_entities(kw->world, list, n);
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)list[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- component access ----------------------------------------------------------------- */

static int w_add(lua_State *L) {
    lua_settop(L, 4); /* an absent value is nil, below any scratch pushed later */
    klua_world *kw = klua_self(L);
    const char *fname = "world:add";
    kiln_entity e = klua_check_entity(L, 2, fname);
    kiln_component c = klua_check_component(L, kw, 3, fname);
    klua_check_access(L, kw, c, true, fname);
    if (!kiln_is_alive(kw->world, e) && !kiln_is_deferred(kw->world)) check_alive(L, kw, e, fname);
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    uint8_t *val = klua_scratch(L, kw, info.size);
    build_value(L, kw, c, 4, val, &info, fname, e);
    if (kiln_add(kw->world, e, c, info.size ? val : NULL) != KILN_OK) {
        unref_value(L, kw, c, val);
        raise_world(L, kw, fname);
    }
    return 0;
}

static int w_remove(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:remove";
    kiln_entity e = klua_check_entity(L, 2, fname);
    kiln_component c = klua_check_component(L, kw, 3, fname);
    klua_check_access(L, kw, c, true, fname);
    bool removed = false;
    if (kiln_remove(kw->world, e, c, &removed) != KILN_OK) raise_world(L, kw, fname);
    lua_pushboolean(L, removed);
    return 1;
}

static int w_has(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:has";
    int ok = 0;
    lua_Integer v = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
    if (!ok) luaL_error(L, "%s: entity must be an integer, got %s", fname, luaL_typename(L, 2));
    kiln_component c = klua_check_component(L, kw, 3, fname);
    klua_check_access(L, kw, c, false, fname);
    lua_pushboolean(L, v > 0 && kiln_has(kw->world, (kiln_entity)v, c));
    return 1;
}

static int w_get(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:get";
    kiln_entity e = klua_check_entity(L, 2, fname);
    kiln_component c = klua_check_component(L, kw, 3, fname);
    klua_check_access(L, kw, c, false, fname);
    check_alive(L, kw, e, fname);
    if (!kiln_has(kw->world, e, c)) {
        lua_pushnil(L);
        return 1;
    }
    klua_push_value(L, kw, c, kiln_get(kw->world, e, c));
    return 1;
}

static int w_set(lua_State *L) {
    lua_settop(L, 4);
    klua_world *kw = klua_self(L);
    const char *fname = "world:set";
    kiln_entity e = klua_check_entity(L, 2, fname);
    kiln_component c = klua_check_component(L, kw, 3, fname);
    klua_check_access(L, kw, c, true, fname);
    check_alive(L, kw, e, fname);
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    char eb[24];
    if (!kiln_has(kw->world, e, c))
        luaL_error(L, "%s: entity %s has no %s", fname, klua_entity_str(e, eb), info.name);
    if (klua_is_lua_valued(kw, c)) {
        /* Replace the Lua value: a new ref, then the old one released. */
        int32_t *slot = kiln_get_mut(kw->world, e, c);
        int32_t ref = klua_value_ref(L, kw, 4);
        int32_t old = *slot;
        *slot = ref;
        unref_value(L, kw, c, &old);
        return 0;
    }
    if (info.size == 0) return 0;
    if (info.field_count == 0) luaL_error(L, "%s: %s has no reflected fields to set from Lua", fname, info.name);
    /* Convert into a copy, then write only the reflected fields in place: owned memory
     * behind unreflected bytes is never duplicated or destroyed. */
    uint8_t *val = klua_scratch(L, kw, info.size);
    memcpy(val, kiln_get(kw->world, e, c), info.size);
    klua_read_fields(L, 4, &info, val, fname, e);
    uint8_t *dst = kiln_get_mut(kw->world, e, c);
    lua_pushnil(L);
    while (lua_next(L, 4)) {
        const kiln_field *f = klua_find_field(&info, lua_tostring(L, -2));
        size_t bytes = kiln_type_size(f->type) * f->count;
        memcpy(dst + f->offset, val + f->offset, bytes);
        lua_pop(L, 1);
    }
    return 0;
}

static int w_tick(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, kiln_tick_current(kw->world));
    return 1;
}

static int w_advance_tick(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, kiln_tick_advance(kw->world));
    return 1;
}

static int w_changed_tick(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_entity e = klua_check_entity(L, 2, "world:changed_tick");
    kiln_component c = klua_check_component(L, kw, 3, "world:changed_tick");
    check_alive(L, kw, e, "world:changed_tick");
    lua_pushinteger(L, kiln_changed_tick(kw->world, e, c));
    return 1;
}

/* ---- hierarchy -------------------------------------------------------------------------- */

static int w_set_parent(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:set_parent";
    kiln_entity child = klua_check_entity(L, 2, fname);
    kiln_entity parent = lua_isnoneornil(L, 3) ? KILN_NULL_ENTITY : klua_check_entity(L, 3, fname);
    kiln_transform_ids ids;
    kiln_transform_ids_get(kw->world, &ids);
    klua_check_access(L, kw, ids.parent, true, fname);
    if (kiln_transform_set_parent(kw->world, child, parent) != KILN_OK) raise_world(L, kw, fname);
    return 0;
}

static int w_children(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_entity e = klua_check_entity(L, 2, "world:children");
    check_alive(L, kw, e, "world:children");
    kiln_transform_ids ids;
    kiln_transform_ids_get(kw->world, &ids);
    klua_check_access(L, kw, ids.parent, false, "world:children");
    int32_t n = kiln_transform_children(kw->world, e, NULL, 0);
    kiln_entity *list = lua_newuserdatauv(L, sizeof(kiln_entity) * (size_t)(n ? n : 1), 0);
    kiln_transform_children(kw->world, e, list, n);
    lua_createtable(L, n, 0);
    for (int32_t i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)list[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int w_despawn_recursive(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_entity e = klua_check_entity(L, 2, "world:despawn_recursive");
    if (kiln_transform_despawn_recursive(kw->world, e) != KILN_OK) raise_world(L, kw, "world:despawn_recursive");
    return 0;
}

/* ---- events ---------------------------------------------------------------------------- */

static kiln_event_type check_event(lua_State *L, klua_world *kw, int arg, const char *fname) {
    const char *name = luaL_checkstring(L, arg);
    kiln_event_type t = kiln_event_lookup(kw->world, name);
    if (!t.id) luaL_error(L, "%s: unknown event '%s'", fname, name);
    return t;
}

static int w_event(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, define(L, kw, true, "world:event"));
    return 1;
}

static int w_emit(lua_State *L) {
    lua_settop(L, 3);
    klua_world *kw = klua_self(L);
    const char *fname = "world:emit";
    kiln_event_type t = check_event(L, kw, 2, fname);
    kiln_component_info info;
    kiln_event_info_get(kw->world, t, &info);
    uint8_t *val = klua_scratch(L, kw, info.size);
    memset(val, 0, info.size);
    if (!lua_isnoneornil(L, 3)) {
        if (info.size == 0) luaL_error(L, "%s: event %s carries no fields", fname, info.name);
        klua_read_fields(L, 3, &info, val, fname, 0);
    }
    if (kiln_event_emit(kw->world, t, val) != KILN_OK) raise_world(L, kw, fname);
    return 0;
}

static int events_step(lua_State *L) {
    klua_world *kw = klua_check_world(L, lua_upvalueindex(1));
    klua_hold_gc(L, kw);
    kiln_event_type t = {(uint32_t)lua_tointeger(L, lua_upvalueindex(2))};
    lua_Integer i = lua_tointeger(L, lua_upvalueindex(3));
    const void *ev = kiln_event_get(kw->world, t, i);
    if (!ev) return 0;
    lua_pushinteger(L, i + 1);
    lua_replace(L, lua_upvalueindex(3));
    kiln_component_info info;
    kiln_event_info_get(kw->world, t, &info);
    lua_createtable(L, 0, info.field_count);
    for (int32_t k = 0; k < info.field_count; k++) {
        klua_push_field(L, &info.fields[k], ev);
        lua_setfield(L, -2, info.fields[k].name);
    }
    return 1;
}

static int w_events(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_event_type t = check_event(L, kw, 2, "world:events");
    lua_pushvalue(L, 1);
    lua_pushinteger(L, t.id);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, events_step, 3);
    return 1;
}

/* ---- resources ------------------------------------------------------------------------- */

static int w_resource(lua_State *L) {
    bool setting = lua_gettop(L) >= 3; /* counted before klua_self pads the arguments */
    klua_world *kw = klua_self(L);
    const char *fname = "world:resource";
    const char *name = luaL_checkstring(L, 2);
    kiln_component c = kiln_component_lookup(kw->world, name);
    if (c && c != kw->shared_type && !klua_is_lua_valued(kw, c)) {
        klua_check_access(L, kw, c, setting, fname);
        if (!setting) {
            if (!kiln_resource_has(kw->world, c)) return 0;
            klua_push_value(L, kw, c, kiln_resource_get(kw->world, c));
            return 1;
        }
        if (lua_isnil(L, 3)) {
            kiln_resource_remove(kw->world, c, NULL);
            return 0;
        }
        kiln_component_info info;
        kiln_component_info_get(kw->world, c, &info);
        uint8_t *val = klua_scratch(L, kw, info.size);
        const void *cur = kiln_resource_get(kw->world, c);
        if (cur) memcpy(val, cur, info.size);
        else memset(val, 0, info.size);
        if (info.size) klua_read_fields(L, 3, &info, val, fname, 0);
        if (cur) {
            /* In place, field by field, as world:set does. */
            memcpy((void *)cur, val, info.size);
        } else if (kiln_resource_set(kw->world, c, val) != KILN_OK) {
            raise_world(L, kw, fname);
        }
        return 0;
    }
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, "resources");
    if (!setting) {
        lua_getfield(L, -1, name);
        return 1;
    }
    lua_pushvalue(L, 3);
    lua_setfield(L, -2, name);
    return 0;
}

static const luaL_Reg world_methods[] = {
    {"close", w_close},
    {"component", w_component},
    {"spawn", w_spawn},
    {"despawn", w_despawn},
    {"is_alive", w_is_alive},
    {"count", w_count},
    {"entities", w_entities},
    {"add", w_add},
    {"remove", w_remove},
    {"has", w_has},
    {"get", w_get},
    {"set", w_set},
    {"tick", w_tick},
    {"advance_tick", w_advance_tick},
    {"changed_tick", w_changed_tick},
    {"query", klua_world_query},
    {"system", klua_world_system},
    {"progress", klua_world_progress},
    {"systems", klua_world_systems},
    {"enable", klua_world_enable},
    {"failures", klua_world_failures},
    {"max_failures", klua_world_max_failures},
    {"set_parent", w_set_parent},
    {"children", w_children},
    {"despawn_recursive", w_despawn_recursive},
    {"event", w_event},
    {"emit", w_emit},
    {"events", w_events},
    {"resource", w_resource},
    {"components", klua_world_components},
    {"component_info", klua_world_component_info},
    {"stats", klua_world_stats},
    {NULL, NULL},
};

int klua_open_world(lua_State *L) {
    luaL_newmetatable(L, KLUA_WORLD);
    luaL_newlibtable(L, world_methods);
    lua_pushvalue(L, -2);
    luaL_setfuncs(L, world_methods, 1); /* each method holds the metatable: see klua_self */
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, w_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, w_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, w_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_pushcfunction(L, w_new);
    return 1;
}
