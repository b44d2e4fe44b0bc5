/* introspect.c: what tools need to show a world: the components of the world or of one
 * entity with their schemas, and world statistics. Read-only; nothing here changes a world. */
#include <string.h>

#include "klua.h"

/* Pushes {name=, id=, size=, kind=, schema=, fields={{name=, type=, count=}, ...}}. */
static void push_component(lua_State *L, klua_world *kw, kiln_component c) {
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    lua_createtable(L, 0, 6);
    lua_pushstring(L, info.name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, c);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, (lua_Integer)info.size);
    lua_setfield(L, -2, "size");
    const char *kind = klua_is_lua_valued(kw, c) ? "lua" : info.size == 0 ? "tag" : "data";
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    if (info.owner) { /* a mod's tag: copies leave it off (kiln_persist.h) */
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "owner");
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    if (klua_is_lua_valued(kw, c)) luaL_addstring(&b, "lua");
    for (int32_t i = 0; i < info.field_count && !klua_is_lua_valued(kw, c); i++) {
        const kiln_field *f = &info.fields[i];
        if (i) luaL_addchar(&b, ' ');
        luaL_addstring(&b, kiln_type_name(f->type));
        luaL_addchar(&b, ' ');
        luaL_addstring(&b, f->name);
        if (f->count > 1 || f->type == KILN_TYPE_CHAR) {
            lua_pushfstring(L, "[%d]", (int)f->count);
            luaL_addvalue(&b);
        }
        luaL_addchar(&b, ';');
    }
    luaL_pushresult(&b);
    lua_setfield(L, -2, "schema");
    lua_createtable(L, info.field_count, 0);
    for (int32_t i = 0; i < info.field_count; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, info.fields[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, kiln_type_name(info.fields[i].type));
        lua_setfield(L, -2, "type");
        lua_pushinteger(L, info.fields[i].count);
        lua_setfield(L, -2, "count");
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "fields");
}

/* world:components() -> every component; world:components(e) -> names of e's components
 * (nil when e is not alive). */
static int w_components(lua_State *L) {
    klua_world *kw = klua_self(L);
    if (lua_isnoneornil(L, 2)) {
        int32_t n = kiln_component_count(kw->world);
        lua_createtable(L, n, 0);
        int k = 0;
        for (kiln_component c = 1; c <= (kiln_component)n; c++) {
            if (c == kw->shared_type) continue;
            push_component(L, kw, c);
            lua_rawseti(L, -2, ++k);
        }
        return 1;
    }
    kiln_entity e = klua_check_entity(L, 2, "world:components");
    int32_t n = kiln_entity_components(kw->world, e, NULL, 0);
    if (n < 0) {
        lua_pushnil(L); /* one nil, as documented: not alive */
        return 1;
    }
    kiln_component *list = lua_newuserdatauv(L, sizeof(kiln_component) * (size_t)(n ? n : 1), 0);
    kiln_entity_components(kw->world, e, list, n);
    lua_createtable(L, n, 0);
    for (int32_t i = 0; i < n; i++) {
        kiln_component_info info;
        kiln_component_info_get(kw->world, list[i], &info);
        lua_pushstring(L, info.name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* world:component_info(name or id) -> the table push_component makes, or nil. */
static int w_component_info(lua_State *L) {
    klua_world *kw = klua_self(L);
    int type = lua_type(L, 2);
    if (type != LUA_TSTRING && type != LUA_TNUMBER) klua_typeerror(L, 2, "world:component_info", "component name");
    size_t n = 0;
    const char *s = type == LUA_TSTRING ? lua_tolstring(L, 2, &n) : NULL;
    kiln_component c = klua_component_quiet(L, kw, 2, s, n); /* an id, or a float holding one */
    if (!c) {
        lua_pushnil(L);
        return 1;
    }
    push_component(L, kw, c);
    return 1;
}

/* world:stats() -> {entities=, archetypes=, components=, queries=, bytes=, tick=} */
static int w_stats(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_world_stats st;
    kiln_world_stats_get(kw->world, &st);
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, st.entities);
    lua_setfield(L, -2, "entities");
    lua_pushinteger(L, st.archetypes);
    lua_setfield(L, -2, "archetypes");
    lua_pushinteger(L, st.components - 1); /* not the binding's internal one */
    lua_setfield(L, -2, "components");
    lua_pushinteger(L, st.queries);
    lua_setfield(L, -2, "queries");
    lua_pushinteger(L, st.bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushinteger(L, kiln_tick_current(kw->world));
    lua_setfield(L, -2, "tick");
    return 1;
}

static const luaL_Reg introspect_methods[] = {
    {"components", w_components},
    {"component_info", w_component_info},
    {"stats", w_stats},
    {NULL, NULL},
};

void klua_open_introspect(lua_State *L) { klua_addmethods(L, KLUA_WORLD, introspect_methods); }
