/* module.c: luaopen_kiln and the embedding entry points: one module table over the classes
 * World, Query and Commands. Holds no state of its own; everything lives in the Lua state. */
#include <string.h>

#include "klua.h"
#include "kiln_scripts.h"
#include "mods.h"

/* Feeds an embedded script to lua_load one line at a time. */
typedef struct script_reader {
    const char *const *next;
} script_reader;

static const char *read_lines(lua_State *L, void *data, size_t *size) {
    (void)L;
    script_reader *r = data;
    if (!*r->next) return NULL;
    const char *line = *r->next++;
    *size = strlen(line);
    return line;
}

/* layer.is_query(v [, world]): whether v is a kiln.Query (lua/kiln/ffi.lua checks self with
 * it), made by the kiln.World world when that is given (query:format reads world's rows). */
static int layer_is_query(lua_State *L) {
    const klua_query *kq = luaL_testudata(L, 1, KLUA_QUERY);
    lua_pushboolean(L, kq && (lua_isnoneornil(L, 2) || (const void *)kq->kw == lua_touserdata(L, 2)));
    return 1;
}

/* layer.class_name(v): the __name of v's real metatable (what getmetatable shows a script
 * may be a public view), or nil. */
static int layer_class_name(lua_State *L) {
    if (!lua_getmetatable(L, 1)) return 0;
    lua_pushliteral(L, "__name");
    lua_rawget(L, -2);
    return lua_type(L, -1) == LUA_TSTRING ? 1 : 0;
}

/* layer.metatable(v): v's real metatable, or nil (a class in Lua tells its own objects by it). */
static int layer_metatable(lua_State *L) {
    return lua_getmetatable(L, 1) ? 1 : 0;
}

/* layer.public_meta(name, methods): the read-only table a class in Lua sets as __metatable. */
static int layer_public_meta(lua_State *L) {
    luaL_checktype(L, 2, LUA_TTABLE);
    klua_push_public_meta(L, luaL_checkstring(L, 1), 2);
    return 1;
}

/* The Lua layer (the files in lua/kiln) takes string, table and math from the globals as it loads: a
 * host state opened without one got "lua/kiln/ffi.lua:9: attempt to index a nil value". */
static void check_libraries(lua_State *L) {
    static const char *const needed[] = {"string", "table", "math", NULL};
    for (int i = 0; needed[i]; i++) {
        int type = lua_getglobal(L, needed[i]);
        lua_pop(L, 1);
        if (type != LUA_TTABLE)
            luaL_error(L, "kiln: the standard library '%s' is missing (kiln needs string, table and math as "
                          "globals: open them before loading kiln, as luaL_openlibs does)", needed[i]);
    }
}

int luaopen_kiln(lua_State *L) {
    luaL_checkversion(L);
    check_libraries(L); /* before anything is registered */
    klua_compat_remember_main(L);
    klua_compat_remember_jit(L); /* before any script could replace jit.status */
    klua_budget_prepare(L);      /* a world's first budgeted run must not grow the registry */
    lua_newtable(L);
    klua_open_world(L); /* the World class first: the others add their methods to it */
    lua_setfield(L, -2, "world");
    klua_open_entities(L);
    klua_open_hierarchy(L);
    klua_open_events(L);
    klua_open_resources(L);
    klua_open_introspect(L);
    klua_open_query(L);
    klua_open_bulk(L);
    klua_open_systems(L);
    klua_open_commands(L);
    klua_open_mods(L); /* kiln.mods */
    klua_open_persist(L);
    klua_open_determinism(L);
    klua_open_scene(L);
    klua_jit_wrap_methods(L); /* LuaJIT only (compat.h); after every class, before the Lua layer */
    lua_pushcfunction(L, klua_commands_new);
    lua_setfield(L, -2, "commands");
    lua_pushfstring(L, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
    lua_setfield(L, -2, "version");
    /* The Lua layer (the lua/kiln directory) extends the module and the classes. Each file
     * gets (kiln, World methods, Query methods, layer): layer is a table private to the
     * layer's files, where one file leaves helpers for the ones loaded after it. */
    lua_newtable(L);
    int layer = lua_gettop(L);
    lua_pushcfunction(L, layer_is_query);
    lua_setfield(L, layer, "is_query");
    lua_pushcfunction(L, layer_class_name);
    lua_setfield(L, layer, "class_name");
    lua_pushcfunction(L, layer_metatable);
    lua_setfield(L, layer, "metatable");
    lua_pushcfunction(L, layer_public_meta);
    lua_setfield(L, layer, "public_meta");
    klua_open_session_layer(L, layer); /* layer.run_answer, answer..., for lua/kiln/repl.lua */
    klua_jit_open_views(L, layer); /* LuaJIT only: layer.views, for lua/kiln/ffi.lua */
    klua_jit_open_spawn(L, layer); /* LuaJIT only: layer.spawn, for lua/kiln/ffi_spawn.lua */
    klua_open_scene_layer(L, layer); /* layer.spawn_all, for lua/kiln/prefab.lua */
    for (int i = 0; kiln_scripts[i].name; i++) {
        script_reader reader = {kiln_scripts[i].lines};
        /* "=" names the chunk verbatim: tracebacks say lua/kiln/inspect.lua:12 */
        const char *chunk = lua_pushfstring(L, "=lua/kiln/%s.lua", kiln_scripts[i].name);
        int status = lua_load(L, read_lines, &reader, chunk, "t");
        lua_remove(L, -2);
        if (status != LUA_OK) return lua_error(L);
        lua_pushvalue(L, layer - 1);
        luaL_getmetatable(L, KLUA_WORLD);
        lua_getfield(L, -1, "__index");
        lua_remove(L, -2);
        luaL_getmetatable(L, KLUA_QUERY);
        lua_getfield(L, -1, "__index");
        lua_remove(L, -2);
        lua_pushvalue(L, layer);
        lua_call(L, 4, 0);
    }
    lua_pop(L, 1); /* the layer table */
    return 1;
}

int kiln_lua_push_world(lua_State *L, kiln_world *world, int32_t workers) {
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_pop(L, 1);
    return klua_new_world(L, world, false, workers);
}
