/* module.c: luaopen_kiln and the embedding entry points: one module table over the classes
 * World, Query and Commands. Holds no state of its own; everything lives in the Lua state. */
#include <stdlib.h>
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

/* layer.is_query(v): whether v is a kiln.Query (lua/kiln/ffi.lua checks self with it). */
static int layer_is_query(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, KLUA_QUERY) != NULL);
    return 1;
}

/* layer.ran(fn, box, ...) -> fn(...): sets box[1] true once fn has returned, before any Lua
 * instruction runs after it (box[1] exists: nothing allocated), unless a budget was spent by
 * then (a console statement's, also inside a coroutine it resumed, or a mod's): that
 * statement was stopped, though its last call returned. What layer.run_answer reads to tell
 * a statement stopped from one that ran. */
static int layer_ran(lua_State *L) {
    luaL_checktype(L, 2, LUA_TTABLE);
    int top = lua_gettop(L);
    lua_pushvalue(L, 1);
    for (int i = 3; i <= top; i++) lua_pushvalue(L, i);
    lua_call(L, top - 2, LUA_MULTRET);
    if (!klua_console_overdue(L) && klua_budget_left(L) != 0 && lua_checkstack(L, 1)) {
        lua_pushboolean(L, 1);
        lua_rawseti(L, 2, 1);
    }
    return lua_gettop(L) - top;
}

/* layer.run_answer(env, printer, run, describe, session, out, box, fn, ...) -> status, text:
 * a session's statement (lua/kiln/repl.lua), as the tail call that ends session:feed. With
 * env.print (read and set raw) the printer, runs run(fn, box, ...) (xpcall's results, packed,
 * fn called through layer.ran); env.print is its own value again however run ends. Then the
 * answer: describe(session, results, out) -> status, text, run protected. Both were Lua
 * code: a stop between the lines (Ctrl-C in the kiln command raises once wherever it lands,
 * a spent budget at every instruction) left the capture in place for good, and a stop after
 * the statement ended (its values shown by kiln.pretty, or just the return to the session)
 * answered "the statement ran past its budget" for a statement whose changes stayed. A stop
 * before fn ended goes on as an error; after, the answer is made here: what the statement
 * printed (out, a list of strings), and that its values or its error were not shown, and why. */
static int layer_run_answer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    luaL_checktype(L, 6, LUA_TTABLE);
    luaL_checktype(L, 7, LUA_TTABLE);
    int top = lua_gettop(L);
    lua_pushliteral(L, "print");
    lua_rawget(L, 1); /* top + 1: the environment's own print */
    lua_pushliteral(L, "print");
    lua_pushvalue(L, 2);
    lua_rawset(L, 1); /* a memory error here leaves env as it was */
    lua_pushvalue(L, 3);
    lua_pushvalue(L, 8);
    lua_pushvalue(L, 7);
    for (int i = 9; i <= top; i++) lua_pushvalue(L, i);
    int status = lua_pcall(L, top - 6, 1, 0);
    lua_pushliteral(L, "print");
    lua_pushvalue(L, top + 1);
    lua_rawset(L, 1); /* the key is there: no allocation */
    int results = lua_gettop(L);
    bool ran;
    if (status == LUA_OK) {
        lua_pushvalue(L, 4);
        lua_pushvalue(L, 5);
        lua_pushvalue(L, results);
        lua_pushvalue(L, 6);
        if (lua_pcall(L, 3, 2, 0) == LUA_OK && lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING)
            return 2;
        lua_settop(L, results + 1); /* describe's error */
        ran = false;
        if (lua_istable(L, results)) {
            lua_rawgeti(L, results, 1);
            ran = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    } else {
        lua_rawgeti(L, 7, 1);
        bool ended = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!ended) return lua_error(L); /* stopped inside the statement */
        ran = true;
    }
    const char *why = lua_tostring(L, -1) ? lua_tostring(L, -1) : "not a string";
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 6);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 6, i) != LUA_TSTRING) {
            lua_pop(L, 1);
            continue;
        }
        luaL_addvalue(&b);
        luaL_addchar(&b, '\n');
    }
    luaL_addstring(&b, ran ? "(the statement ran; its values were not shown: "
                           : "(the statement raised; its error was not shown: ");
    luaL_addstring(&b, why);
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    lua_pushstring(L, ran ? "ok" : "error");
    lua_insert(L, -2);
    return 2;
}

/* The answer of a session command whose call failed: "error" and its message. */
static int error_answer(lua_State *L) {
    const char *msg = lua_tostring(L, -1);
    lua_pushliteral(L, "error");
    if (msg) lua_pushstring(L, msg);
    else lua_pushfstring(L, "error (a %s)", luaL_typename(L, -2));
    return 2;
}

/* layer.answer(text, fn, ...) -> "ok", text when fn(...) ran, else "error", its message. The
 * end of a session command that changes something (lua/kiln/repl.lua), as its tail call: no
 * Lua code runs after fn, so a stop that raises at every instruction (a spent budget, a
 * console statement's time limit) cannot report a failure for a call that was made. */
static int layer_answer(lua_State *L) {
    luaL_checkstring(L, 1);
    if (lua_pcall(L, lua_gettop(L) - 2, 2, 0) != LUA_OK) return error_answer(L);
    if (!lua_toboolean(L, -2) && lua_type(L, -1) == LUA_TSTRING) return error_answer(L); /* nil, why */
    lua_pushliteral(L, "ok");
    lua_pushvalue(L, 1);
    return 2;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* layer.reload_answer(reload, mods, name): as layer.answer for mods:reload(name) (reload),
 * the answer made here: "ok", "reloaded NAME (N systems)", or "error" and why, naming each
 * dependent whose reload failed (its message cut at 300 bytes), by name. */
static int layer_reload_answer(lua_State *L) {
    const char *name = luaL_checkstring(L, 3);
    lua_settop(L, 3);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    if (lua_pcall(L, 2, 2, 0) != LUA_OK) return error_answer(L);
    int info = 4, failed = 5;
    if (!lua_toboolean(L, info)) return error_answer(L);
    const char *who = NULL;
    if (lua_istable(L, info)) {
        lua_getfield(L, info, "name");
        if (lua_type(L, -1) == LUA_TSTRING) who = lua_tostring(L, -1); /* info's own table keeps it */
        lua_pop(L, 1);
    }
    if (who) {
        lua_getfield(L, info, "systems");
        int systems = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
        lua_pop(L, 1);
        lua_pushfstring(L, "reloaded %s (%d systems)", who, systems);
    } else {
        lua_pushfstring(L, "reloaded %s", name);
    }
    if (!lua_istable(L, failed)) {
        lua_pushliteral(L, "ok");
        lua_insert(L, -2);
        return 2;
    }
    /* the dependents whose reload failed run on in their old versions: an error, naming each */
    int text = lua_gettop(L);
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, failed); lua_pop(L, 1)) n += lua_type(L, -2) == LUA_TSTRING;
    const char **deps = lua_newuserdatauv(L, (n ? n : 1) * sizeof *deps, 0);
    size_t k = 0;
    for (lua_pushnil(L); lua_next(L, failed); lua_pop(L, 1))
        if (lua_type(L, -2) == LUA_TSTRING && k < n) deps[k++] = lua_tostring(L, -2); /* the table keeps it */
    qsort(deps, k, sizeof *deps, compare_names);
    for (size_t i = 0; i < k; i++) {
        lua_getfield(L, failed, deps[i]);
        size_t len = 0;
        const char *why = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        lua_pushvalue(L, text);
        lua_pushfstring(L, "; its dependent %s failed to reload: ", deps[i]);
        if (why) lua_pushlstring(L, why, len > 300 ? 300 : len);
        else lua_pushstring(L, luaL_typename(L, -3));
        lua_pushstring(L, len > 300 ? "..." : "");
        lua_concat(L, 4);
        lua_replace(L, text);
        lua_pop(L, 1);
    }
    lua_settop(L, text);
    lua_pushliteral(L, "error");
    lua_insert(L, -2);
    return 2;
}

/* layer.load_answer(load, world, path) -> "ok", "loaded N entities from path" when
 * load(world, path) (world.load) returned its map of N entities, else "error", its message;
 * as layer.answer, with the count made here. */
static int layer_load_answer(lua_State *L) {
    const char *path = luaL_checkstring(L, 3);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) return error_answer(L);
    int n = 0;
    if (lua_istable(L, -1))
        for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) n++;
    lua_pushliteral(L, "ok");
    lua_pushfstring(L, "loaded %d entities from %s", n, path);
    return 2;
}

int luaopen_kiln(lua_State *L) {
    luaL_checkversion(L);
    klua_compat_remember_main(L);
    klua_compat_remember_jit(L); /* before any script could replace jit.status */
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
    lua_pushcfunction(L, layer_run_answer);
    lua_setfield(L, layer, "run_answer");
    lua_pushcfunction(L, layer_ran);
    lua_setfield(L, layer, "ran");
    lua_pushcfunction(L, layer_answer);
    lua_setfield(L, layer, "answer");
    lua_pushcfunction(L, layer_load_answer);
    lua_setfield(L, layer, "load_answer");
    lua_pushcfunction(L, layer_reload_answer);
    lua_setfield(L, layer, "reload_answer");
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
