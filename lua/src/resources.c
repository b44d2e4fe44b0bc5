/* resources.c: world:resource, one value per world and name: a registered data component
 * (stored in the core, visible to C systems) or, for any other name, a Lua value. */
#include <stdio.h>
#include <string.h>

#include "klua.h"

/* Sets or reads the core resource c (a data component or a tag). */
static int core_resource(lua_State *L, klua_world *kw, kiln_component c, bool setting) {
    const char *fname = "world:resource";
    if (kw->host) { /* a mod's view: kiln's own components, and the world's random streams */
        kiln_component_info own;
        kiln_component_info_get(kw->world, c, &own);
        if (strncmp(own.name, "kiln.", 5) == 0)
            klua_argerror(L, 2, fname, "component '%s' is kiln's own; mods cannot use it", own.name);
        /* the seed every system's stream is forked from (world:seed refuses a mod too) */
        if (setting && (strcmp(own.name, "RandomSeed") == 0 || strcmp(own.name, "RandomState") == 0))
            klua_fail(L, fname, "the host seeds the world (%s)", own.name);
    }
    klua_check_access(L, kw, c, setting, fname);
    if (!setting) {
        if (!kiln_resource_has(kw->world, c)) return 0;
        klua_push_value(L, kw, c, kiln_resource_get(kw->world, c));
        return 1;
    }
    bool has = kiln_resource_has(kw->world, c);
    if (lua_isnil(L, 3)) {
        if (kw->mod_hooks && has) kw->mod_hooks->before_resource(L, kw, c, false, fname); /* may refuse */
        kiln_resource_remove(kw->world, c, NULL);
        return 0;
    }
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    if (info.size == 0 && !(lua_isboolean(L, 3) && lua_toboolean(L, 3)))
        klua_argerror(L, 3, fname, "%s is a tag: give true or nil, not %s", info.name,
                      lua_isboolean(L, 3) ? "false" : luaL_typename(L, 3));
    if (kw->mod_hooks && info.size && !has) /* raises past the mod's budget */
        kw->mod_hooks->before_grow(L, kw, KILN_NULL_ENTITY, c, (int64_t)info.stride, fname);
    uint8_t *val = klua_scratch(L, kw, info.size);
    const void *cur = kiln_resource_get(kw->world, c);
    if (cur) memcpy(val, cur, info.size);
    else klua_default_value(&info, val);
    if (info.size) klua_read_fields(L, 3, &info, val, fname, 0);
    /* the in-place write skips kiln_resource_set's check hook (RandomState refuses all zero): ask it */
    if (info.has_check && kiln_component_check(kw->world, KILN_NULL_ENTITY, c, val) != KILN_OK)
        klua_fail_world(L, kw->world, fname);
    if (cur) memcpy((void *)cur, val, info.size); /* in place, as world:set does */
    if (has) return 0;
    if (kw->mod_hooks) kw->mod_hooks->before_resource(L, kw, c, true, fname); /* a top level's: recorded */
    if (kiln_resource_set(kw->world, c, val) != KILN_OK) klua_fail_world(L, kw->world, fname);
    return 0;
}

kiln_component klua_resource_layout(const klua_world *kw, const char *name, size_t len) {
    kiln_component c = klua_name_ok(name, len) ? kiln_component_lookup(kw->world, name) : KILN_NO_COMPONENT;
    return c && c != kw->shared_type && !klua_is_lua_valued(kw, c) ? c : KILN_NO_COMPONENT;
}

bool klua_resources_hidden(lua_State *L, const klua_world *kw, int idx, char *why, size_t why_size) {
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        size_t len;
        const char *name = lua_tolstring(L, -2, &len);
        lua_pop(L, 1);
        if (!klua_resource_layout(kw, name, len)) continue;
        snprintf(why, why_size, "the saved Lua resource '%.64s' is named like a component of this world, which would hide it", name);
        lua_pop(L, 1);
        return true;
    }
    return false;
}

static int w_resource(lua_State *L) {
    bool setting = lua_gettop(L) >= 3; /* counted before klua_self pads the arguments */
    klua_world *kw = klua_self(L);
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, "world:resource", "resource name");
    size_t len;
    const char *name = lua_tolstring(L, 2, &len);
    kiln_component c = klua_resource_layout(kw, name, len);
    if (c) return core_resource(L, kw, c, setting);
    /* Any other name holds a Lua value, keyed by the whole string. */
    if (!klua_push_state(L, 1, KLUA_STATE_RESOURCES))
        klua_fail(L, "world:resource", "the world's state was changed through the debug library");
    lua_pushvalue(L, 2);
    if (!setting) {
        lua_rawget(L, -2);
        return 1;
    }
    lua_pushvalue(L, 3);
    lua_rawset(L, -3);
    return 0;
}

static const luaL_Reg resource_methods[] = {
    {"resource", w_resource},
    {NULL, NULL},
};

void klua_open_resources(lua_State *L) { klua_addmethods(L, KLUA_WORLD, resource_methods); }
