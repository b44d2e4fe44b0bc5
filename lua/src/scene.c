/* scene.c: World methods over the persistence addon's prefabs and scenes: prefabs read from
 * JSON, world:instantiate, world:export and the kiln.Instance class. Every argument (prefab defs
 * converted included) is checked before the world is touched; the C calls are all or nothing. */
#include <ctype.h>
#include <string.h>

#include <jansson.h>

#include "kiln_persist.h"
#include "console.h" /* klua_console_charge_read */
#include "klua.h"

#define KLUA_PREFAB_TREE "kiln.PrefabTree" /* the C prefab behind a kiln.Prefab read from JSON */
#define KLUA_INSTANCE "kiln.Instance"
#define MAX_DEF_DEPTH 64

/* User values of a kiln.PrefabTree and a kiln.Instance: the World they belong to. */
enum klua_scene_uv { SCENE_UV_WORLD = 1, SCENE_UV_COUNT = SCENE_UV_WORLD };

typedef struct klua_prefab_tree {
    kiln_prefab *prefab;
    klua_world *kw;
} klua_prefab_tree;

typedef struct klua_instance {
    kiln_instance *instance;
    klua_world *kw;
} klua_instance;

/* JSON text (its first non-space byte is '{') rather than a path. */
static bool looks_like_json(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i < n && s[i] == '{';
}

static klua_prefab_tree *push_tree(lua_State *L, klua_world *kw, int world_idx) {
    klua_prefab_tree *t = klua_newobject(L, sizeof *t, SCENE_UV_COUNT, KLUA_PREFAB_TREE);
    t->prefab = NULL;
    t->kw = kw;
    lua_pushvalue(L, world_idx);
    lua_setiuservalue(L, -2, SCENE_UV_WORLD);
    return t;
}

/* The World of a tree or an instance at idx, checked open; raises naming fname otherwise. */
static klua_world *owner_world(lua_State *L, int idx, const char *fname) {
    lua_getiuservalue(L, idx, SCENE_UV_WORLD);
    klua_world *kw = luaL_testudata(L, -1, KLUA_WORLD);
    if (!kw || !kw->world) klua_fail(L, fname, "the world is closed");
    lua_pop(L, 1);
    return kw;
}

/* world:prefab(json_or_path): the native half of world:prefab (lua/kiln/prefab.lua keeps it
 * for strings and wraps the result in a kiln.Prefab). */
static int w_prefab_json(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:prefab";
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, fname, "JSON text or path (string)");
    if (kw->host) klua_fail(L, fname, "a mod makes prefabs from tables (their entities carry its tag)");
    size_t n;
    const char *s = lua_tolstring(L, 2, &n);
    if (strlen(s) != n) klua_argerror(L, 2, fname, "a string without NUL bytes expected");
    uint64_t charged = klua_console_charge_read(L, fname, s, n, !looks_like_json(s, n), false, NULL);
    klua_prefab_tree *t = push_tree(L, kw, 1);
    /* a console statement's (or an entry's) time limit holds inside the reading, and a file is
     * read no further than what was charged */
    klua_budget_watch watch = {.L = L};
    kiln_prefab_load_desc d = {.keep_going = klua_budget_watch_continue, .ud = &watch, .max_bytes = charged};
    kiln_result r = looks_like_json(s, n) ? kiln_prefab_load(kw->world, s, n, &d, &t->prefab)
                                          : kiln_prefab_load_file(kw->world, s, &d, &t->prefab);
    if (r != KILN_OK && watch.stopped) klua_budget_watch_end(&watch, fname);
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    return 1;
}

/* tree:spawn(n [, single]) -> a list of n roots, or (single) the first (prefab.lua checks n
 * and the self, and calls this as a tail call: no Lua instruction runs after the spawn). */
static int tree_spawn(lua_State *L) {
    klua_prefab_tree *t = luaL_checkudata(L, 1, KLUA_PREFAB_TREE);
    const char *fname = "prefab:spawn";
    lua_Integer n = luaL_checkinteger(L, 2);
    klua_world *kw = owner_world(L, 1, fname);
    int64_t nodes = kiln_prefab_nodes(t->prefab);
    if (n < 0 || n > INT32_MAX || (nodes && n > INT32_MAX / nodes))
        klua_argerror(L, 2, fname, "a count from 0 to %d expected", (int)(nodes ? INT32_MAX / nodes : 0)); /* (Lua formats: no %lld) */
    kiln_entity *roots = lua_newuserdatauv(L, sizeof(kiln_entity) * ((size_t)n + 1), 0);
    /* the list first, its slots made: running out of memory for it cannot follow the spawn */
    lua_createtable(L, (int)n, 0);
    /* a console statement's (or an entry's) time limit holds inside the spawns: a stop takes
     * them all back */
    klua_budget_watch watch = {.L = L};
    kiln_prefab_spawn_desc d = {.keep_going = klua_budget_watch_continue, .ud = &watch};
    if (kiln_prefab_spawn(kw->world, t->prefab, (int32_t)n, &d, roots) != KILN_OK) {
        if (watch.stopped) klua_budget_watch_end(&watch, fname);
        klua_fail_world(L, kw->world, fname);
    }
    for (lua_Integer i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)roots[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (lua_toboolean(L, 3)) lua_rawgeti(L, -1, 1);
    return 1;
}

static int tree_gc(lua_State *L) {
    klua_prefab_tree *t = klua_toobject(L, 1, KLUA_PREFAB_TREE); /* a finalizer never raises */
    if (!t) return 0;
    kiln_prefab_destroy(t->prefab);
    t->prefab = NULL;
    return 0;
}

/* ---- a kiln.Prefab made from a table, as a C prefab for a scene ---- */

typedef struct def_builder {
    lua_State *L;
    klua_world *kw;
    int anchor;          /* a table keeping the buffers below alive */
    int anchored;
    const char *fname;
} def_builder;

static void *anchored(def_builder *b, size_t size) {
    void *p = lua_newuserdatauv(b->L, size ? size : 1, 0);
    memset(p, 0, size ? size : 1);
    lua_rawseti(b->L, b->anchor, ++b->anchored);
    return p;
}

/* Pushes def[key] (at idx), read raw: a table, or an empty one for nil. The def is
 * prefab.lua's checked copy, which no script reaches; checked all the same. */
static int def_part(def_builder *b, int idx, const char *key, const char *pname) {
    lua_pushstring(b->L, key);
    int t = lua_rawget(b->L, idx);
    if (t == LUA_TNIL) lua_newtable(b->L), lua_replace(b->L, -2);
    else if (t != LUA_TTABLE)
        klua_fail(b->L, b->fname, "prefab '%s': its def.%s was changed to a %s", pname, key, lua_typename(b->L, t));
    return lua_gettop(b->L);
}

/* Converts the checked def at idx (prefab.lua's copy: components, children) into d. */
static void def_desc(def_builder *b, int idx, kiln_prefab_desc *d, const char *pname, int depth) {
    lua_State *L = b->L;
    if (depth > MAX_DEF_DEPTH) klua_fail(L, b->fname, "prefab '%s' nests more than %d deep", pname, MAX_DEF_DEPTH);
    luaL_checkstack(L, 8, "prefab def");
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx)) klua_fail(L, b->fname, "prefab '%s': a node of its def was changed to a %s", pname, luaL_typename(L, idx));
    int comps = def_part(b, idx, "components", pname);
    int32_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, comps)) n++, lua_pop(L, 1);
    kiln_component *ids = anchored(b, sizeof(kiln_component) * (size_t)n);
    const void **values = anchored(b, sizeof(void *) * (size_t)n);
    int32_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, comps)) {
        if (lua_type(L, -2) != LUA_TSTRING) /* (lua_tostring would change the key under lua_next) */
            klua_fail(L, b->fname, "prefab '%s': a component named by a %s", pname, luaL_typename(L, -2));
        const char *name = lua_tostring(L, -2);
        kiln_component id = kiln_component_lookup(b->kw->world, name);
        kiln_component_info info;
        if (!kiln_component_info_get(b->kw->world, id, &info))
            klua_fail(L, b->fname, "prefab '%s': unknown component '%s'", pname, name);
        if (klua_is_lua_valued(b->kw, id))
            klua_fail(L, b->fname, "prefab '%s': component '%s' holds Lua values, which a scene cannot copy", pname, name);
        void *buf = anchored(b, info.size);
        klua_build_value(L, b->kw, id, -1, buf, &info, b->fname, 0);
        ids[i] = id;
        values[i++] = buf;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    int kids = def_part(b, idx, "children", pname);
    size_t len = lua_rawlen(L, kids);
    if (len > INT32_MAX) klua_fail(L, b->fname, "prefab '%s': too many children", pname);
    int32_t k = (int32_t)len;
    kiln_prefab_desc *children = anchored(b, sizeof(kiln_prefab_desc) * (size_t)k);
    for (int32_t c = 0; c < k; c++) {
        lua_rawgeti(L, kids, c + 1);
        def_desc(b, -1, &children[c], pname, depth + 1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    *d = (kiln_prefab_desc){.components = ids, .values = values, .component_count = n,
                            .children = children, .child_count = k};
}

/* The C prefab of the kiln.Prefab at idx (named pname in the options): its parts are kept
 * in the registry's KLUA_REG_PREFABS (prefab.lua's private table, out of a script's reach),
 * so a table that only looks like a prefab has none. A table-made one is converted into a
 * kiln.PrefabTree; either is left on the stack, held for the call (the collector frees it). */
static const kiln_prefab *prefab_of(lua_State *L, klua_world *kw, int idx, const char *pname, const char *fname) {
    idx = lua_absindex(L, idx);
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_PREFABS) == LUA_TTABLE) {
        lua_pushvalue(L, idx);
        lua_rawget(L, -2);
        lua_remove(L, -2);
    }
    int parts = lua_gettop(L); /* (the registry is the host's: checked, not assumed) */
    if (!lua_istable(L, parts)) klua_argerror(L, 3, fname, "prefabs.%s: kiln.Prefab expected, got %s", pname, luaL_typename(L, idx));
    lua_pushliteral(L, "world");
    lua_rawget(L, parts);
    bool same = lua_rawequal(L, -1, 1);
    lua_pop(L, 1);
    if (!same) klua_argerror(L, 3, fname, "prefabs.%s: the prefab was made for another world", pname);
    lua_pushliteral(L, "native");
    lua_rawget(L, parts);
    klua_prefab_tree *t = luaL_testudata(L, -1, KLUA_PREFAB_TREE);
    if (t) {
        lua_replace(L, parts); /* held for the call where the parts were */
        return t->prefab;
    }
    lua_pop(L, 1);
    lua_pushliteral(L, "def");
    lua_rawget(L, parts);
    int def = lua_gettop(L);
    lua_newtable(L);
    def_builder b = {L, kw, lua_gettop(L), 0, fname};
    kiln_prefab_desc root;
    def_desc(&b, def, &root, pname, 1);
    t = push_tree(L, kw, 1);
    if (kiln_prefab_create(kw->world, &root, &t->prefab) != KILN_OK) klua_fail_world(L, kw->world, fname);
    lua_replace(L, parts); /* the tree stays where the parts were; the def and buffers may go */
    lua_settop(L, parts);
    return t->prefab;
}

/* ---- world:instantiate ---- */

/* Pushes an Instance of the world at 1, empty until the scene is in: it is made first, so
 * that running out of memory for it cannot follow the spawns. */
static klua_instance *push_instance(lua_State *L, klua_world *kw) {
    klua_instance *ki = klua_newobject(L, sizeof *ki, SCENE_UV_COUNT, KLUA_INSTANCE);
    ki->instance = NULL;
    ki->kw = kw;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, SCENE_UV_WORLD);
    return ki;
}

static int w_instantiate(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:instantiate";
    static const char *const keys[] = {"prefabs", "parent", NULL};
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, fname, "scene (JSON text) or path (string)");
    if (kw->host) klua_fail(L, fname, "a mod spawns with world:spawn or a prefab (its entities carry its tag)");
    size_t len;
    const char *s = lua_tolstring(L, 2, &len);
    if (strlen(s) != len) klua_argerror(L, 2, fname, "a string without NUL bytes expected");
    kiln_instantiate_desc d = {0};
    /* (no lua_settop below the arguments: see world:load in persist.c) */
    int table = 0; /* the prefabs table's slot, or 0 */
    if (!lua_isnil(L, 3)) {
        if (!lua_istable(L, 3)) klua_typeerror(L, 3, fname, "table");
        klua_check_keys(L, 3, 3, fname, keys, false);
        lua_pushliteral(L, "parent");
        lua_rawget(L, 3);
        if (!lua_isnil(L, -1)) {
            lua_Integer p = lua_tointeger(L, -1);
            if (!lua_isinteger(L, -1) || p <= 0) klua_argerror(L, 3, fname, "parent must be an entity");
            klua_check_alive(L, kw, (kiln_entity)p, fname);
            d.parent = (kiln_entity)p;
        }
        lua_pop(L, 1);
        lua_pushliteral(L, "prefabs");
        lua_rawget(L, 3);
        if (!lua_isnil(L, -1) && !lua_istable(L, -1)) klua_argerror(L, 3, fname, "prefabs must be a table of kiln.Prefab by name");
        if (lua_istable(L, -1)) table = lua_gettop(L);
    }
    int32_t count = 0;
    if (table) {
        lua_pushnil(L);
        while (lua_next(L, table)) {
            if (lua_type(L, -2) != LUA_TSTRING || strlen(lua_tostring(L, -2)) != lua_rawlen(L, -2))
                klua_argerror(L, 3, fname, "prefabs are named by strings without NUL bytes");
            if (count == INT32_MAX / 2) klua_argerror(L, 3, fname, "too many prefabs");
            count++;
            lua_pop(L, 1);
        }
    }
    const char **names = lua_newuserdatauv(L, sizeof(char *) * ((size_t)count + 1), 0);
    const kiln_prefab **prefabs = lua_newuserdatauv(L, sizeof(kiln_prefab *) * ((size_t)count + 1), 0);
    lua_newtable(L); /* the converted prefabs, held for the call */
    int held = lua_gettop(L);
    int32_t i = 0;
    if (count) {
        lua_pushnil(L);
        while (lua_next(L, table)) {
            names[i] = lua_tostring(L, -2); /* the key stays in the options table */
            prefabs[i] = prefab_of(L, kw, -1, names[i], fname);
            lua_rawseti(L, held, i + 1);  /* whatever prefab_of left: the tree or the native */
            lua_pop(L, 1);
            i++;
        }
    }
    d.prefab_names = names;
    d.prefabs = prefabs;
    d.prefab_count = count;
    /* the time limit holds inside the reading, and a scene whose spawns end past it is taken
     * back in C: returned past the limit, it would be lost to the raise at the caller's next
     * instruction with its entities kept */
    klua_budget_watch watch = {.L = L};
    d.keep_going = klua_budget_watch_continue;
    d.ud = &watch;
    d.max_bytes = klua_console_charge_read(L, fname, s, len, !looks_like_json(s, len), false, NULL);
    klua_instance *ki = push_instance(L, kw);
    kiln_result r = looks_like_json(s, len) ? kiln_instantiate(kw->world, s, len, &d, &ki->instance)
                                            : kiln_instantiate_file(kw->world, s, &d, &ki->instance);
    if (r != KILN_OK && watch.stopped) klua_budget_watch_end(&watch, fname);
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    return 1;
}

/* ---- the kiln.Instance class ---- */

static void push_entities(lua_State *L, const kiln_instance *inst, bool roots) {
    int64_t n = roots ? kiln_instance_roots(inst, NULL, 0) : kiln_instance_spawned(inst, NULL, 0);
    kiln_entity *list = lua_newuserdatauv(L, sizeof(kiln_entity) * ((size_t)n + 1), 0);
    if (roots) kiln_instance_roots(inst, list, n);
    else kiln_instance_spawned(inst, list, n);
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)list[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_remove(L, -2);
}

/* Pushes a JSON value as Lua (null as nil). */
static void push_json(lua_State *L, const json_t *v, int depth) {
    luaL_checkstack(L, 4, "scene properties");
    if (depth > 200) luaL_error(L, "scene properties nest too deep");
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        lua_createtable(L, 0, (int)json_object_size(v));
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)v, key, item) {
            push_json(L, item, depth + 1);
            lua_setfield(L, -2, key);
        }
        return;
    }
    case JSON_ARRAY:
        lua_createtable(L, (int)json_array_size(v), 0);
        for (size_t i = 0; i < json_array_size(v); i++) {
            push_json(L, json_array_get(v, i), depth + 1);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        return;
    case JSON_STRING: lua_pushlstring(L, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(v)); return;
    case JSON_REAL: lua_pushnumber(L, json_real_value(v)); return;
    case JSON_TRUE: case JSON_FALSE: lua_pushboolean(L, json_is_true(v)); return;
    default: lua_pushnil(L); return;
    }
}

static int push_properties(lua_State *L) {
    push_json(L, lua_touserdata(L, 1), 0);
    return 1;
}

/* An Instance its own __gc released (a finalizer kept it past that __gc, or a host script
 * called the __gc early) has no list left: it raises, not reads as an empty scene. */
static void instance_alive(lua_State *L, const klua_instance *ki) {
    if (!ki->instance)
        luaL_error(L, "attempt to use a scene instance that was released (its finalizer ran)");
}

/* The Instance a method was called on, or raises "calling 'instance:entity' on bad self (...)"
 * as every method does: klua_check_self cannot name these, which __index (a function) gives. */
static klua_instance *check_instance(lua_State *L, const char *fname) {
    klua_instance *ki = luaL_testudata(L, 1, KLUA_INSTANCE);
    if (!ki) klua_typeerror(L, 1, fname, KLUA_INSTANCE);
    instance_alive(L, ki);
    return ki;
}

static int instance_entity(lua_State *L) {
    klua_instance *ki = check_instance(L, "instance:entity");
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, "instance:entity", "string");
    size_t n;
    const char *name = lua_tolstring(L, 2, &n); /* no scene name holds a NUL (C reads up to one) */
    kiln_entity e = klua_name_ok(name, n) ? kiln_instance_entity(ki->instance, name) : 0;
    if (e) lua_pushinteger(L, (lua_Integer)e);
    else lua_pushnil(L);
    return 1;
}

static int instance_despawn(lua_State *L) {
    klua_instance *ki = check_instance(L, "instance:despawn");
    klua_world *kw = owner_world(L, 1, "instance:despawn");
    if (kiln_instance_despawn(kw->world, ki->instance) != KILN_OK) klua_fail_world(L, kw->world, "instance:despawn");
    return 0;
}

static int instance_index(lua_State *L) {
    klua_instance *ki = luaL_checkudata(L, 1, KLUA_INSTANCE);
    const char *key = lua_tostring(L, 2);
    if (!key) return 0;
    instance_alive(L, ki);
    if (strcmp(key, "roots") == 0) push_entities(L, ki->instance, true);
    else if (strcmp(key, "spawned") == 0) push_entities(L, ki->instance, false);
    else if (strcmp(key, "name") == 0) lua_pushstring(L, kiln_instance_name(ki->instance));
    else if (strcmp(key, "entity") == 0) lua_pushcfunction(L, instance_entity);
    else if (strcmp(key, "despawn") == 0) lua_pushcfunction(L, instance_despawn);
    else if (strcmp(key, "properties") == 0) {
        /* NULs allowed as the scene's reader allows them ("\u0000" in a string: without the
         * flag the text the scene was read from failed here, reported as out of memory) */
        json_error_t err;
        json_t *props = json_loads(kiln_instance_properties(ki->instance), JSON_ALLOW_NUL, &err);
        if (!props) return luaL_error(L, "instance.properties: %s", err.text);
        lua_pushlightuserdata(L, props); /* protected, so props is freed whatever happens */
        int status = klua_pcall_c(L, push_properties, 1, 1, 0);
        json_decref(props);
        if (status != LUA_OK) return lua_error(L);
    } else return 0;
    return 1;
}

static int instance_gc(lua_State *L) {
    klua_instance *ki = klua_toobject(L, 1, KLUA_INSTANCE); /* a finalizer never raises */
    if (!ki) return 0;
    kiln_instance_destroy(ki->instance);
    ki->instance = NULL;
    return 0;
}

/* "kiln.Instance (moon, 4 entities)"; a scene without a name prints none (it printed
 * "kiln.Instance (, 1 entities)"). */
static int instance_tostring(lua_State *L) {
    klua_instance *ki = luaL_checkudata(L, 1, KLUA_INSTANCE);
    if (!ki->instance) {
        lua_pushstring(L, "kiln.Instance (released)");
        return 1;
    }
    const char *name = kiln_instance_name(ki->instance);
    int spawned = (int)kiln_instance_spawned(ki->instance, NULL, 0);
    if (name && *name) lua_pushfstring(L, "kiln.Instance (%s, %d entities)", name, spawned);
    else lua_pushfstring(L, "kiln.Instance (%d entities)", spawned);
    return 1;
}

/* ---- world:export ---- */

/* Output collected with the Lua state's allocator: a failure returns false (the export then
 * fails and frees what it built) instead of raising inside the C call. */
typedef struct text_sink {
    lua_State *L;
    char *data;
    size_t size, cap;
    bool refused; /* the allocator refused a growth: the export ran out of memory */
} text_sink;

static bool sink_write(void *ud, const void *data, size_t size) {
    text_sink *s = ud;
    if (size > s->cap - s->size) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap - s->size < size) {
            if (cap > SIZE_MAX / 2) return false;
            cap *= 2;
        }
        void *aud;
        lua_Alloc fa = lua_getallocf(s->L, &aud);
        char *p = fa(aud, s->data, s->data ? s->cap : 0, cap);
        if (!p) return s->refused = true, false;
        s->data = p;
        s->cap = cap;
    }
    memcpy(s->data + s->size, data, size);
    s->size += size;
    return true;
}

static void sink_free(text_sink *s) {
    void *aud;
    lua_Alloc fa = lua_getallocf(s->L, &aud);
    if (s->data) fa(aud, s->data, s->cap, 0);
    s->data = NULL;
}

/* the string of the sink's text (called protected: the text is freed whatever happens) */
static int push_text(lua_State *L) {
    const text_sink *s = lua_touserdata(L, 1);
    lua_pushlstring(L, s->data ? s->data : "", s->size);
    return 1;
}

static int w_export(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:export";
    static const char *const keys[] = {"name", NULL};
    if (kw->host) klua_fail(L, fname, "a mod cannot export the host's world");
    if (kw->current && !kw->current->exclusive) /* (the access guard would abort on the first read) */
        klua_fail(L, fname, "system '%s' is not exclusive: an export reads every component", kw->current->name);
    /* (arguments 2 and 3 are there, padded: no lua_settop below them, see world:load) */
    kiln_export_desc d = {0};
    if (!lua_isnil(L, 2)) {
        if (!lua_istable(L, 2)) klua_typeerror(L, 2, fname, "list of entities");
        size_t n = lua_rawlen(L, 2); /* raw, as the roots are read: no __len runs mid-call */
        if (n > INT32_MAX) klua_argerror(L, 2, fname, "too many roots");
        kiln_entity *roots = lua_newuserdatauv(L, sizeof(kiln_entity) * ((size_t)n + 1), 0);
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, 2, (lua_Integer)i + 1);
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
                klua_argerror(L, 2, fname, "roots[%d] must be an entity", (int)(i + 1));
            roots[i] = (kiln_entity)lua_tointeger(L, -1);
            lua_pop(L, 1);
            klua_check_alive(L, kw, roots[i], fname);
        }
        d.roots = roots;
        d.root_count = (int32_t)n;
    }
    if (!lua_isnil(L, 3)) {
        if (!lua_istable(L, 3)) klua_typeerror(L, 3, fname, "table");
        klua_check_keys(L, 3, 3, fname, keys, false);
        lua_pushliteral(L, "name");
        lua_rawget(L, 3);
        if (!lua_isnil(L, -1) && (lua_type(L, -1) != LUA_TSTRING || strlen(lua_tostring(L, -1)) != lua_rawlen(L, -1)))
            klua_argerror(L, 3, fname, "name must be a string without NUL bytes");
        d.name = lua_tostring(L, -1); /* stays on the stack */
    }
    text_sink sink = {L, NULL, 0, 0, false};
    /* as world:save: JSON's work is charged, and the export stops at the time limit */
    klua_budget_watch watch = {.L = L, .steps_per_unit = KLUA_COST_JSON_UNIT};
    d.progress = klua_budget_watch_report;
    d.progress_ud = &watch;
    if (kiln_export(kw->world, &d, sink_write, &sink) != KILN_OK) {
        sink_free(&sink);
        if (sink.refused) klua_fail(L, fname, "out of memory"); /* (kiln says its writer refused) */
        if (watch.stopped) klua_budget_watch_end(&watch, fname);
        klua_fail_world(L, kw->world, fname);
    }
    /* a push raising for memory here left the text allocated, never freed */
    lua_pushlightuserdata(L, &sink);
    int rc = klua_pcall_c(L, push_text, 1, 1, 0);
    sink_free(&sink);
    if (rc != LUA_OK) klua_fail(L, fname, "out of memory");
    klua_budget_watch_end(&watch, fname); /* (the text is on the stack: nothing to free) */
    return 1;
}

/* The message of a raise inside a table-made prefab's spawn, without the name of the method
 * that raised it ("world:spawn: "), as a Lua pattern ^[%a_][%w_.:]*: would take it. */
static const char *spawn_reason(lua_State *L, int idx) {
    const char *m = lua_tostring(L, idx);
    if (!m) return luaL_typename(L, idx);
    const char *p = m;
    if (isalpha((unsigned char)*p) || *p == '_') {
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == ':') p++;
        /* the longest run, then ": " (a pattern would backtrack to an earlier ": " only
         * inside the run, where ':' followed by ' ' cannot occur) */
        if (p > m && p[-1] == ':' && *p == ' ') return p + 1;
    }
    return m;
}

/* layer.spawn_all(world, fn, spawned, roots, single): the end of prefab:spawn, called as a
 * tail call so that no Lua instruction of the method runs after the spawn (a hook raising
 * there would report a failure for a spawn that stays). Runs fn (the spawns) protected and
 * returns roots[1] (single) or roots. When fn raises, the handles in spawned (read raw, last
 * first; false marks a slot made before its spawn) are unspawned here in C before the error
 * goes on as "prefab:spawn: reason": taking them back in Lua could not be relied on, since a
 * hook that raises at every instruction (a spent budget, a console statement's time limit)
 * stops any Lua code, pcall or not. */
static int layer_spawn_all(lua_State *L) {
    /* named as a JSON prefab's spawn names it: klua_check_world's luaL_error would name the
     * line of prefab.lua that called this */
    klua_world *open = luaL_testudata(L, 1, KLUA_WORLD);
    if (open && open->closed) klua_fail(L, "prefab:spawn", "the world is closed");
    klua_check_world(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    int single = lua_toboolean(L, 5);
    lua_settop(L, 4);
    lua_pushvalue(L, 2);
    if (lua_pcall(L, 0, 0, 0) == LUA_OK) {
        if (single) lua_rawgeti(L, 4, 1);
        else lua_pushvalue(L, 4);
        return 1;
    }
    klua_world *kw = lua_touserdata(L, 1);
    /* fn may have closed the world (a finalizer): its entities went with it */
    for (lua_Integer i = (lua_Integer)lua_rawlen(L, 3); i >= 1 && !kw->closed; i--) {
        lua_rawgeti(L, 3, i);
        int ok = 0;
        lua_Integer e = lua_tointegerx(L, -1, &ok);
        lua_pop(L, 1);
        /* the slots go back as they were: only kiln's own Lua code held these handles */
        if (ok && e > 0) kiln_unspawn(kw->world, (kiln_entity)e); /* refused: already gone */
    }
    /* where prefab:spawn was called: the method's frame is level 1 while this runs under Lua
     * 5.4, which keeps it through a tail call to C; LuaJIT has already dropped it */
    lua_Debug ar;
    int level = 1;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar) && strcmp(ar.source, "=lua/kiln/prefab.lua") == 0)
        level = 2;
    luaL_where(L, level);
    lua_pushfstring(L, "prefab:spawn: %s", spawn_reason(L, 5));
    lua_concat(L, 2);
    return lua_error(L);
}

/* layer.spawn_into(world, components, spawned, k) -> world:spawn(components), stored in
 * spawned[k] (a slot the caller made: the store allocates nothing) before any Lua code can
 * run between the spawn and its record. */
static int layer_spawn_into(lua_State *L) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer k = luaL_checkinteger(L, 4);
    lua_settop(L, 4);
    lua_getfield(L, 1, "spawn"); /* as w:spawn(components) finds it */
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 1);
    lua_pushvalue(L, -1);
    lua_rawseti(L, 3, k);
    return 1;
}

/* layer.unreachable(world, name) -> why world (a mod's view) may not name the component, or
 * nil: a prefab made from a table is checked whole when it is made, as a spawn would check it. */
static int layer_unreachable(lua_State *L) {
    klua_world *kw = klua_check_world(L, 1);
    size_t n;
    const char *s = luaL_checklstring(L, 2, &n);
    kiln_component c = klua_component_quiet(L, kw, 2, s, n);
    if (c == KILN_NO_COMPONENT || !klua_unreachable(L, kw, c)) lua_pushnil(L);
    return 1;
}

void klua_open_scene_layer(lua_State *L, int layer) {
    /* layer.prefabs: a kiln.Prefab's parts by prefab (weak keys: they go with it), shared
     * with prefab_of above through the registry */
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KLUA_REG_PREFABS);
    lua_setfield(L, layer, "prefabs");
    lua_pushcfunction(L, layer_unreachable);
    lua_setfield(L, layer, "unreachable");
    lua_pushcfunction(L, layer_spawn_all);
    lua_setfield(L, layer, "spawn_all");
    lua_pushcfunction(L, layer_spawn_into);
    lua_setfield(L, layer, "spawn_into");
}

static const luaL_Reg scene_methods[] = {
    {"prefab", w_prefab_json},
    {"instantiate", w_instantiate},
    {"export", w_export},
    {NULL, NULL},
};

static const luaL_Reg tree_methods[] = {{"spawn", tree_spawn}, {NULL, NULL}};
static const luaL_Reg tree_meta[] = {{"__gc", tree_gc}, {NULL, NULL}};

void klua_open_scene(lua_State *L) {
    klua_addmethods(L, KLUA_WORLD, scene_methods);
    klua_createmeta(L, KLUA_PREFAB_TREE, tree_methods, tree_meta);
    klua_claim_class(L, KLUA_INSTANCE);
    luaL_newmetatable(L, KLUA_INSTANCE);
    static const luaL_Reg instance_meta[] = {
        {"__index", instance_index}, {"__gc", instance_gc}, {"__tostring", instance_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, instance_meta, 0);
    lua_pop(L, 1);
}
