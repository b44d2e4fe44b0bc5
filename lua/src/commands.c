/* commands.c: kiln.Commands, a command buffer recorded from Lua and applied to any world:
 * records keep names and Lua values, so a component may be defined only before the apply.
 * Invariant: records [head, count) are pending; placeholders are -1, -2, ... in the order
 * the batch spawned them, and resolve once their spawn has been applied. */
#include <string.h>

#include "klua.h"

enum { OP_SPAWN = 1, OP_DESPAWN, OP_ADD, OP_SET, OP_REMOVE };
#define FIELDS 4 /* per record: op, target, name, value */

typedef struct klua_commands {
    lua_Integer head, count;  /* pending records */
    lua_Integer spawns;       /* placeholders handed out in this batch */
    lua_Integer batch;        /* the batch's tag (0 until it first spawns): names its placeholders */
    bool complete;            /* the last apply took everything: the next record starts a batch */
    const struct klua_comp *link; /* while an add or set applies: its component, when it has
                                   * entity fields that may hold placeholders (else NULL) */
    lua_Integer checking;     /* while a mod's apply checks its records first: 1 + the spawns
                               * before the record checked (its placeholders up to those are
                               * good); 0 when applying */
    bool applying;            /* an apply runs: a finalizer calling apply or clear then would
                               * land the record in flight twice, or resume in cleared records */
} klua_commands;

/* A placeholder is -(tag * 2^20 + k) for the k-th spawn (from 1) of a batch. A batch takes its
 * tag when it first spawns, from one of two spaces: the host's state takes the odd tags, from
 * its own counter (KLUA_REG_TAGS in its registry), and every mod state its managers made the
 * even ones, from one counter they share (KLUA_REG_MOD_TAGS in the host's registry). So a
 * mod's placeholder is never the host's, nor the host's a mod's, and no mod can spend the
 * host's tags. A space goes round after its last tag (2^33 - 1 odd, 2^33 - 2 even) instead of
 * running out: a tag comes back only after 2^32 - 1 batches of that space spawned, so an old
 * placeholder, another buffer's or another space's can only be refused, never taken for a new
 * spawn, short of being kept that long. |placeholder| < 2^53: exact as a LuaJIT number. */
#define BATCH_SHIFT 20
#define TAG_LIMIT ((lua_Integer)1 << 33)
static lua_Integer placeholder(lua_Integer tag, lua_Integer k) { return -((tag << BATCH_SHIFT) + k); }
static lua_Integer spawn_number(lua_Integer p) { return (-p) & ((1 << BATCH_SHIFT) - 1); }
static lua_Integer batch_of(lua_Integer p) { return (-p) >> BATCH_SHIFT; }

static klua_commands *check_cmds(lua_State *L) { return klua_check_self(L, KLUA_COMMANDS, "commands"); }

/* Registry key, in a mod state, of the host's main thread (light userdata), whose registry
 * holds the mods' counter; mod code cannot reach its registry. */
static const char host_key = 0;

/* A new batch tag for a buffer of thread L. Each counter holds the last tag its space handed
 * out (0: none yet), an integer the host's state got when kiln was opened in it (the mods'
 * one: when its first manager was made), so setting it allocates nothing; a mod state reaches the mods' counter through the host's main thread
 * (alive while the mod's state is: the manager closes it), with two slots of its stack
 * pushed and popped. */
static lua_Integer next_tag(lua_State *L) {
    lua_State *H = L;
    bool mod = lua_rawgetp(L, LUA_REGISTRYINDEX, &host_key) == LUA_TLIGHTUSERDATA;
    if (mod) H = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (mod && !lua_checkstack(H, 2)) klua_fail(L, "commands:spawn", "the host's stack is full");
    const char *key = mod ? KLUA_REG_MOD_TAGS : KLUA_REG_TAGS;
    lua_Integer first = mod ? 2 : 1; /* the space's first tag, and its parity */
    int ok = 0;
    lua_Integer last = lua_getfield(H, LUA_REGISTRYINDEX, key) == LUA_TNUMBER ? lua_tointegerx(H, -1, &ok) : 0;
    lua_pop(H, 1);
    if (!ok || last < 0 || last >= TAG_LIMIT || (last != 0 && (last & 1) != (first & 1)))
        klua_fail(L, "commands:spawn", "its placeholder tags were changed through the debug library");
    lua_Integer tag = last == 0 || last + 2 >= TAG_LIMIT ? first : last + 2;
    lua_pushinteger(H, tag);
    lua_setfield(H, LUA_REGISTRYINDEX, key); /* the key is there: nothing allocated */
    return tag;
}

void klua_commands_link(lua_State *L, lua_State *host) {
    lua_pushlightuserdata(L, host);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &host_key);
}

int klua_commands_new(lua_State *L) {
    klua_commands *c = klua_newobject(L, sizeof *c, KLUA_COMMANDS_UV_COUNT, KLUA_COMMANDS);
    memset(c, 0, sizeof *c);
    lua_newtable(L);
    lua_setiuservalue(L, -2, KLUA_COMMANDS_UV_RECORDS);
    lua_newtable(L);
    lua_setiuservalue(L, -2, KLUA_COMMANDS_UV_RESOLVED);
    return 1;
}

/* Checks an entity or a placeholder of this batch. */
static lua_Integer check_target(lua_State *L, klua_commands *c, int arg, const char *fname) {
    int ok = 0;
    lua_Integer v = lua_type(L, arg) == LUA_TNUMBER ? lua_tointegerx(L, arg, &ok) : 0;
    if (!ok) klua_typeerror(L, arg, fname, "entity or placeholder");
    if (v == LUA_MININTEGER) klua_argerror(L, arg, fname, "%I is neither an entity nor a placeholder", v);
    if (v < 0 && (c->complete || batch_of(v) != c->batch || spawn_number(v) == 0 ||
                  spawn_number(v) > c->spawns))
        klua_argerror(L, arg, fname, "placeholder %I is not from this buffer's current batch", v);
    if (v == 0) klua_argerror(L, arg, fname, "entity is null");
    return v;
}

static const char *op_name(int op) {
    switch (op) {
    case OP_SPAWN: return "spawn";
    case OP_DESPAWN: return "despawn";
    case OP_ADD: return "add";
    case OP_SET: return "set";
    default: return "remove";
    }
}

/* Pushes user value n of the Commands at 1 (a table kiln made), or raises: a host script
 * holding the debug library can replace it (debug.setuservalue). */
static void push_table_uv(lua_State *L, int n, const char *fname) {
    if (lua_getiuservalue(L, 1, n) != LUA_TTABLE)
        klua_fail(L, fname, "its state was changed through the debug library");
}

/* Writes a record, then changes the buffer: a memory error while writing (a mod at its memory
 * limit) leaves the buffer as it was, its applied batch still resolving. A record after a
 * complete apply starts a batch, whose resolved table is made first. */
static void push_record(lua_State *L, klua_commands *c, int op, lua_Integer target, int name_idx,
                        int value_idx) {
    bool fresh = c->complete;
    if (fresh) lua_newtable(L);
    if (c->head == c->count) c->head = c->count = 0; /* nothing pending either way */
    if (lua_getiuservalue(L, 1, KLUA_COMMANDS_UV_RECORDS) != LUA_TTABLE)
        klua_fail(L, lua_pushfstring(L, "commands:%s", op_name(op)), "its state was changed through the debug library");
    lua_Integer base = c->count * FIELDS;
    lua_pushinteger(L, op);
    lua_rawseti(L, -2, base + 1);
    lua_pushinteger(L, target);
    lua_rawseti(L, -2, base + 2);
    if (name_idx) lua_pushvalue(L, name_idx);
    else lua_pushnil(L);
    lua_rawseti(L, -2, base + 3);
    if (value_idx) lua_pushvalue(L, value_idx);
    else lua_pushnil(L);
    lua_rawseti(L, -2, base + 4);
    lua_pop(L, 1);
    if (fresh) {
        lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_RESOLVED);
        lua_pushnil(L);
        lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_WORLD);
        c->spawns = 0;
        c->batch = 0; /* no tag until it spawns */
        c->complete = false;
    }
    c->count++;
}

static int c_spawn(lua_State *L) {
    klua_commands *c = check_cmds(L);
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2)) klua_typeerror(L, 2, "commands:spawn", "table");
    if (!c->complete && c->spawns == (1 << BATCH_SHIFT) - 1)
        klua_fail(L, "commands:spawn", "too many spawns in one batch (%d): apply the buffer first", (1 << BATCH_SHIFT) - 1);
    /* the tag first: refused, it leaves the buffer as it was (an applied batch resolving); a
     * tag taken by a spawn that then fails is skipped, never handed out twice */
    lua_Integer tag = c->complete || c->batch == 0 ? next_tag(L) : c->batch;
    lua_Integer k = c->complete ? 1 : c->spawns + 1;
    lua_Integer p = placeholder(tag, k);
    push_record(L, c, OP_SPAWN, p, 0, lua_isnoneornil(L, 2) ? 0 : 2);
    c->batch = tag;
    c->spawns = k;
    lua_pushinteger(L, p);
    return 1;
}

static int c_despawn(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_Integer t = check_target(L, c, 2, "commands:despawn");
    push_record(L, c, OP_DESPAWN, t, 0, 0);
    return 0;
}

static void check_name(lua_State *L, int arg, const char *fname) {
    if (lua_type(L, arg) != LUA_TSTRING) klua_typeerror(L, arg, fname, "component name");
}

static int c_add(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_Integer t = check_target(L, c, 2, "commands:add");
    check_name(L, 3, "commands:add");
    push_record(L, c, OP_ADD, t, 3, lua_isnone(L, 4) ? 0 : 4);
    return 0;
}

static int c_set(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_Integer t = check_target(L, c, 2, "commands:set");
    check_name(L, 3, "commands:set");
    push_record(L, c, OP_SET, t, 3, lua_isnone(L, 4) ? 0 : 4);
    return 0;
}

static int c_remove(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_Integer t = check_target(L, c, 2, "commands:remove");
    check_name(L, 3, "commands:remove");
    push_record(L, c, OP_REMOVE, t, 3, 0);
    return 0;
}

/* ---- Placeholders inside values: at apply, an entity field (or an entity array's element)
 * holding a placeholder of this batch whose spawn has been applied becomes that entity, in a
 * copy of the recorded table (the caller's stays as it was). Any other placeholder fails the
 * record. Decided per record by the schema cache's links flag, so values of components
 * without entity fields are passed on as they are; a spawn's init is only probed for the
 * world's components with entity fields (klua_links), so a world without any costs a spawn
 * record no look at its init at all. */

static bool is_placeholder(lua_State *L, int idx, lua_Integer *p) {
    if (lua_type(L, idx) != LUA_TNUMBER || !lua_isinteger(L, idx)) return false;
    *p = lua_tointeger(L, idx);
    return *p < 0 && *p != LUA_MININTEGER;
}

/* Pushes the entity placeholder p became, or raises naming the field (fname) of component
 * cname. Checking, pushes p itself when its spawn comes before the record checked. */
static void push_resolved_entity(lua_State *L, const klua_commands *c, int resolved, lua_Integer p,
                                 const char *fname, const char *cname) {
    if (batch_of(p) != c->batch || spawn_number(p) == 0 || spawn_number(p) > c->spawns)
        luaL_error(L, "field '%s' of %s holds placeholder %I, which is not from this buffer's current batch",
                   fname, cname, p);
    if (c->checking) {
        if (spawn_number(p) >= c->checking)
            luaL_error(L, "field '%s' of %s holds placeholder %I whose spawn comes later in the buffer", fname,
                       cname, p);
        lua_pushinteger(L, p);
        return;
    }
    if (lua_rawgeti(L, resolved, spawn_number(p)) != LUA_TNUMBER) /* false: the spawn running */
        luaL_error(L, "field '%s' of %s holds placeholder %I whose spawn comes later in the buffer", fname,
                   cname, p);
}

/* Pushes a plain copy of the table at idx (raw keys and values; no metatable). */
static void push_copy(lua_State *L, int idx) {
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -4);
    }
}

/* Component id's schema cache entry in world kw, when its values may hold placeholders (it
 * has entity fields and data values); NULL otherwise. */
static const klua_comp *linked_id(lua_State *L, klua_world *kw, kiln_component id) {
    if (!id || klua_is_lua_valued(kw, id)) return NULL;
    const klua_comp *cc = klua_comp_ready(kw, id);
    if (!cc) cc = klua_comp_get(L, kw, id);
    if (!cc->links) return NULL;
    /* kiln's own components stay unreachable to mods: their methods refuse them first */
    if (kw->host && strncmp(cc->info.name, "kiln.", 5) == 0) return NULL;
    return cc;
}

/* The component the name at idx (s, n bytes, when a string) names in world kw, when its
 * values may hold placeholders; NULL otherwise (an unknown name is left for the world's method to refuse). */
static const klua_comp *linked_comp(lua_State *L, klua_world *kw, int idx, const char *s, size_t n) {
    if (kw->closed) return NULL; /* the method refuses the closed world */
    return linked_id(L, kw, klua_component_quiet(L, kw, idx, s, n));
}

/* Whether a spawn into kw may need its init's placeholders resolved: the world has a
 * component with entity fields. */
static bool world_links(lua_State *L, klua_world *kw) {
    int32_t n = 0;
    if (!kw->closed) klua_links(L, kw, &n);
    return n > 0;
}

/* Raises as a world method on a closed world does. */
static void check_open(lua_State *L, const klua_world *kw) {
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
}

/* Pushes the value at vidx, or a copy of it with its placeholders resolved. Making a table or
 * a string may run a finalizer that closes kw, freeing cc and its names: cc is read only
 * after kw was seen open since the last such call, and names go on as Lua strings. */
static void push_linked(lua_State *L, const klua_world *kw, const klua_commands *c, int resolved,
                        const klua_comp *cc, int vidx) {
    vidx = lua_absindex(L, vidx);
    lua_pushvalue(L, vidx);
    if (!cc || kw->closed || !lua_istable(L, vidx)) return;
    int out = lua_gettop(L);
    bool copied = false;
    lua_pushstring(L, cc->info.name);
    int cname = lua_gettop(L);
    for (int32_t i = 0;; i++) {
        check_open(L, kw);
        if (i >= cc->info.field_count) break;
        kiln_field f = cc->info.fields[i];
        if (f.type != KILN_TYPE_ENTITY) continue;
        lua_pushstring(L, f.name);
        int key = lua_gettop(L);
        lua_pushvalue(L, key);
        int t = lua_rawget(L, vidx);
        int field = lua_gettop(L);
        const char *fname = lua_tostring(L, key), *cn = lua_tostring(L, cname);
        lua_Integer p;
        if (f.count <= 1 && is_placeholder(L, field, &p)) {
            if (!copied) {
                push_copy(L, vidx);
                lua_replace(L, out);
                copied = true;
            }
            lua_pushvalue(L, key);
            push_resolved_entity(L, c, resolved, p, fname, cn);
            lua_rawset(L, out);
        } else if (f.count > 1 && t == LUA_TTABLE) {
            int arr = 0;
            for (uint32_t k = 1; k <= f.count; k++) {
                lua_rawgeti(L, field, (lua_Integer)k);
                bool held = is_placeholder(L, -1, &p);
                lua_pop(L, 1);
                if (!held) continue;
                if (!arr) { /* the first placeholder: copy the value, then the array */
                    if (!copied) {
                        push_copy(L, vidx);
                        lua_replace(L, out);
                        copied = true;
                    }
                    push_copy(L, field);
                    arr = lua_gettop(L);
                    lua_pushvalue(L, key);
                    lua_pushvalue(L, arr);
                    lua_rawset(L, out);
                }
                push_resolved_entity(L, c, resolved, p, fname, cn);
                lua_rawseti(L, arr, (lua_Integer)k);
            }
        }
        lua_settop(L, cname);
    }
    lua_settop(L, out);
}

/* Pushes a spawn's init at idx, or a copy with the values' placeholders resolved. Only the
 * world's components with entity fields are looked up in it, by name and by id (the keys a
 * spawn takes), not the whole init walked. */
static void push_linked_init(lua_State *L, klua_world *kw, const klua_commands *c, int resolved, int idx) {
    lua_pushvalue(L, idx);
    if (!lua_istable(L, idx) || kw->closed) return;
    int out = lua_gettop(L);
    bool copied = false;
    int32_t n;
    klua_links(L, kw, &n);
    for (int32_t i = 0; i < n && !kw->closed; i++) { /* a finalizer may close the world */
        kiln_component id = kw->link_ids[i]; /* re-read: a finalizer may grow the list */
        const klua_comp *cc = linked_id(L, kw, id);
        if (!cc || kw->closed) continue;
        for (int key = 0; key < 2; key++) {
            if (key == 0) lua_pushstring(L, cc->info.name);
            else lua_pushinteger(L, (lua_Integer)id);
            lua_pushvalue(L, -1);
            if (lua_rawget(L, idx) != LUA_TTABLE) {
                lua_settop(L, out);
                continue;
            }
            push_linked(L, kw, c, resolved, cc, -1);
            if (!lua_rawequal(L, -1, -2)) {
                if (!copied) {
                    push_copy(L, idx);
                    lua_replace(L, out);
                    copied = true;
                }
                lua_pushvalue(L, out + 1); /* the key */
                lua_insert(L, -2);
                lua_rawset(L, out);
            }
            lua_settop(L, out);
            if (kw->closed) return; /* a finalizer closed the world: the spawn refuses it */
        }
    }
}

/* Applies one record through the world's own methods; errors propagate to the pcall. */
static int apply_one(lua_State *L) {
    /* args: world, op, target entity, name, value */
    int op = (int)lua_tointeger(L, 2);
    static const char *const methods[] = {NULL, "spawn", "despawn", "add", "set", "remove"};
    if (op < OP_SPAWN || op > OP_REMOVE) return luaL_error(L, "its record was changed through the debug library");
    if (op == OP_DESPAWN) {
        lua_getfield(L, 1, "is_alive");
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 3);
        lua_call(L, 2, 1);
        if (!lua_toboolean(L, -1)) return 0; /* died meanwhile: skipped */
        lua_pop(L, 1);
    }
    lua_getfield(L, 1, methods[op]);
    lua_pushvalue(L, 1);
    if (op == OP_SPAWN) {
        lua_pushvalue(L, 5);
        lua_call(L, 2, 1);
        return 1;
    }
    lua_pushvalue(L, 3);
    int nargs = 2;
    if (op != OP_DESPAWN) {
        lua_pushvalue(L, 4);
        nargs++;
    }
    if (op == OP_ADD || op == OP_SET) {
        lua_pushvalue(L, 5);
        nargs++;
    }
    lua_call(L, nargs, 0);
    return 0;
}

/* apply_one for a record whose value may hold placeholders: a spawn with an init, or an
 * add or set of a component with entity fields (c->link). Upvalues: the Commands, its
 * resolved table, the klua_world (checked by c_apply; the world userdata at 1 keeps it).
 * Checking (c->checking), only resolves, to raise for a placeholder it could not. */
static int apply_linked(lua_State *L) {
    klua_commands *c = lua_touserdata(L, lua_upvalueindex(1));
    klua_world *kw = lua_touserdata(L, lua_upvalueindex(3));
    const klua_comp *link = c->link; /* freed if a finalizer closed kw since: push_linked checks */
    c->link = NULL;
    int op = (int)lua_tointeger(L, 2), resolved = lua_upvalueindex(2);
    if (op == OP_SPAWN) {
        push_linked_init(L, kw, c, resolved, 5);
        lua_replace(L, 5);
    } else if (link && (op == OP_ADD || op == OP_SET)) {
        push_linked(L, kw, c, resolved, link, 5);
        lua_replace(L, 5);
    }
    return c->checking ? 0 : apply_one(L);
}

/* A mod's buffer lands whole or not at all as far as its placeholders and its entity limit
 * go: before the first record runs, every placeholder a pending record uses (as its target
 * or in an entity field) must be of this batch with its spawn before the record, and the
 * pending spawns must fit what the mod may still spawn. Pushes nil, a message and 0 and
 * returns 3 on a refusal (nothing applied, the records kept), else returns 0. The function
 * at linked_fn resolves in check mode; records and resolved are stack slots. */
static int check_pending(lua_State *L, klua_commands *c, klua_world *kw, int records, int linked_fn) {
    lua_Integer pending_spawns = 0;
    for (lua_Integer i = c->head; i < c->count; i++) {
        lua_rawgeti(L, records, i * FIELDS + 1);
        pending_spawns += lua_tointeger(L, -1) == OP_SPAWN;
        lua_pop(L, 1);
    }
    int64_t room = kw->mod_hooks->spawn_room(kw);
    if (pending_spawns > room) {
        lua_pushnil(L);
        lua_pushfstring(L, "commands:apply: the buffer spawns %I entities; the mod may spawn %I more",
                        pending_spawns, (lua_Integer)room);
        lua_pushinteger(L, 0);
        return 3;
    }
    lua_Integer seen = c->spawns - pending_spawns; /* spawns of the batch applied already */
    for (lua_Integer i = c->head; i < c->count; i++) {
        lua_Integer base = i * FIELDS;
        int top = lua_gettop(L);
        lua_rawgeti(L, records, base + 1);
        int op = (int)lua_tointeger(L, -1);
        lua_rawgeti(L, records, base + 2);
        lua_Integer target = lua_tointeger(L, -1);
        lua_rawgeti(L, records, base + 3);
        lua_rawgeti(L, records, base + 4);
        size_t clen = 0;
        const char *cname = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &clen) : NULL;
        const char *why = NULL;
        if (op != OP_SPAWN && target < 0 &&
            (batch_of(target) != c->batch || spawn_number(target) == 0 || spawn_number(target) > seen)) {
            why = lua_pushfstring(L, "uses placeholder %I whose spawn comes later in the buffer", target);
        } else {
            c->link = (op == OP_ADD || op == OP_SET) && lua_type(L, -1) == LUA_TTABLE
                          ? linked_comp(L, kw, -2, cname, clen)
                          : NULL;
            if (c->link || (op == OP_SPAWN && lua_type(L, -1) == LUA_TTABLE && world_links(L, kw))) {
                lua_pushvalue(L, linked_fn);
                lua_pushvalue(L, 2);
                for (int k = 1; k <= 4; k++) lua_pushvalue(L, top + k);
                c->checking = seen + 1;
                int status = lua_pcall(L, 5, 0, 0);
                c->checking = 0;
                c->link = NULL;
                if (status != LUA_OK) why = lua_tostring(L, -1) ? lua_tostring(L, -1) : "error";
            }
        }
        if (why) {
            char eb[24];
            const char *ename = op == OP_SPAWN ? "(new)" : target < 0 ? lua_pushfstring(L, "%I", target)
                                                                        : klua_entity_str((kiln_entity)target, eb);
            lua_pushnil(L);
            lua_pushfstring(L, "commands:apply: command %I (%s%s%s) on entity %s: %s", i - c->head + 1, op_name(op),
                            cname ? " " : "", cname ? cname : "", ename, why);
            lua_pushinteger(L, 0);
            return 3;
        }
        lua_settop(L, top);
        seen += op == OP_SPAWN;
    }
    return 0;
}

static int apply_records(lua_State *L) {
    klua_commands *c = lua_touserdata(L, 1);
    klua_world *kw = klua_check_world(L, 2);
    push_table_uv(L, KLUA_COMMANDS_UV_RECORDS, "commands:apply");
    push_table_uv(L, KLUA_COMMANDS_UV_RESOLVED, "commands:apply");
    int records = lua_gettop(L) - 1, resolved = lua_gettop(L);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, resolved);
    lua_pushlightuserdata(L, kw);
    lua_pushcclosure(L, apply_linked, 3);
    int linked_fn = lua_gettop(L);
    lua_pushcfunction(L, apply_one);
    int plain_fn = lua_gettop(L);
    /* the batch's placeholders resolved to entities of the world its spawns landed in: in
     * another, the records naming them would land on whatever entity has those handles */
    if (c->head < c->count && lua_getiuservalue(L, 1, KLUA_COMMANDS_UV_WORLD) == LUA_TUSERDATA) {
        const klua_world *was = luaL_testudata(L, -1, KLUA_WORLD);
        if (!was || was->closed || was->world != kw->world) {
            lua_pushnil(L);
            lua_pushliteral(L, "commands:apply: the batch spawned into another world, whose entities its "
                               "placeholders name: apply the rest there, or clear the buffer");
            lua_pushinteger(L, 0);
            return 3;
        }
    }
    lua_pop(L, 1);
    if (kw->mod_hooks && c->head < c->count) {
        int refused = check_pending(L, c, kw, records, linked_fn);
        if (refused) return refused;
    }
    lua_Integer applied = 0;
    while (c->head < c->count) {
        lua_Integer base = c->head * FIELDS;
        lua_pushnil(L); /* the function: apply_one, or apply_linked when the value may link */
        int fn_slot = lua_gettop(L);
        lua_pushvalue(L, 2);
        lua_rawgeti(L, records, base + 1);
        int op = (int)lua_tointeger(L, -1);
        lua_rawgeti(L, records, base + 2);
        lua_Integer target = lua_tointeger(L, -1);
        if (target < 0 && op != OP_SPAWN) {
            lua_pop(L, 1);
            if (lua_rawgeti(L, resolved, spawn_number(target)) != LUA_TNUMBER) {
                lua_settop(L, resolved);
                lua_pushnil(L);
                lua_pushfstring(L, "commands:apply: command %I (%s) uses placeholder %I whose spawn has not been applied",
                                applied + 1, op_name(op), target);
                lua_pushinteger(L, applied);
                return 3;
            }
        }
        lua_rawgeti(L, records, base + 3);
        lua_rawgeti(L, records, base + 4);
        /* Names for a message: the component and the entity the command aims at. */
        size_t clen = 0;
        const char *cname = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &clen) : NULL;
        lua_Integer who = lua_tointeger(L, -3);
        /* decided here, by the schema cache's flag, so a value without entity fields costs
         * one type test and a cached lookup */
        c->link = (op == OP_ADD || op == OP_SET) && lua_type(L, -1) == LUA_TTABLE ? linked_comp(L, kw, -2, cname, clen) : NULL;
        lua_copy(L, c->link || (op == OP_SPAWN && lua_type(L, -1) == LUA_TTABLE && world_links(L, kw)) ? linked_fn
                                                                                                   : plain_fn,
                 fn_slot);
        /* A spawn's resolved slot is made (false) before it runs: once its entity has landed,
         * taking the record allocates nothing, so no memory error can leave a landed spawn
         * pending, to land again at the next apply. */
        if (op == OP_SPAWN) {
            lua_pushboolean(L, 0);
            lua_rawseti(L, resolved, spawn_number(target));
        }
        if (lua_pcall(L, 5, 1, 0) != LUA_OK) {
            /* The failing record and those after it stay; a later apply resumes here. */
            if (op == OP_SPAWN) {
                lua_pushnil(L);
                lua_rawseti(L, resolved, spawn_number(target));
            }
            char eb[24];
            const char *ename = op == OP_SPAWN ? "(new)" : klua_entity_str((kiln_entity)who, eb);
            lua_pushnil(L);
            lua_pushfstring(L, "commands:apply: command %I (%s%s%s) on entity %s: %s", applied + 1, op_name(op),
                            cname ? " " : "", cname ? cname : "", ename, lua_tostring(L, -2));
            lua_pushinteger(L, applied);
            return 3;
        }
        if (op == OP_SPAWN) {
            lua_rawseti(L, resolved, spawn_number(target));
            lua_pushvalue(L, 2); /* a user value: set without allocating, the entity landed */
            lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_WORLD);
        } else lua_pop(L, 1);
        /* release the record's values */
        for (int k = 3; k <= 4; k++) {
            lua_pushnil(L);
            lua_rawseti(L, records, base + k);
        }
        c->head++;
        applied++;
    }
    c->head = c->count = 0;
    c->complete = true;
    lua_pushinteger(L, applied);
    return 1;
}

/* Runs apply_records with the buffer marked applying, cleared however it ends. A finalizer run
 * mid-apply (the collector steps inside the world's methods) must not apply or clear it. */
static int c_apply(lua_State *L) {
    klua_commands *c = check_cmds(L);
    if (!luaL_testudata(L, 2, KLUA_WORLD)) klua_typeerror(L, 2, "commands:apply", KLUA_WORLD);
    klua_check_world(L, 2);
    if (c->checking || c->applying) /* a finalizer run inside this buffer's apply */
        klua_fail(L, "commands:apply", "the buffer is being applied by another apply");
    lua_settop(L, 2);
    c->applying = true;
    int status = klua_pcall_c(L, apply_records, 2, LUA_MULTRET, 0);
    c->applying = false;
    if (status != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

/* Both tables are made before either replaces the old: a memory error leaves the buffer as
 * it was. */
static int c_clear(lua_State *L) {
    klua_commands *c = check_cmds(L);
    if (c->checking || c->applying) klua_fail(L, "commands:clear", "the buffer is being applied");
    lua_newtable(L);
    lua_newtable(L);
    lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_RESOLVED);
    lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_RECORDS);
    lua_pushnil(L);
    lua_setiuservalue(L, 1, KLUA_COMMANDS_UV_WORLD);
    c->head = c->count = 0;
    c->spawns = 0;
    c->batch = 0; /* no tag until it spawns */
    c->complete = false;
    return 0;
}

static int c_resolved(lua_State *L) {
    klua_commands *c = check_cmds(L);
    int ok = 0;
    lua_Integer p = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
    if (!ok) klua_typeerror(L, 2, "commands:resolved", "placeholder");
    if (p >= 0 || p == LUA_MININTEGER || batch_of(p) != c->batch || spawn_number(p) == 0 || spawn_number(p) > c->spawns)
        klua_argerror(L, 2, "commands:resolved", "%I is not a placeholder of this batch", p);
    push_table_uv(L, KLUA_COMMANDS_UV_RESOLVED, "commands:resolved");
    if (lua_rawgeti(L, -1, spawn_number(p)) != LUA_TNUMBER) lua_pushnil(L); /* false: its spawn running */
    return 1;
}

static int c_count(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_pushinteger(L, c->count - c->head);
    return 1;
}

static int c_tostring(lua_State *L) {
    klua_commands *c = check_cmds(L);
    lua_pushfstring(L, "kiln.Commands (%I pending)", c->count - c->head);
    return 1;
}

static const luaL_Reg commands_methods[] = {
    {"spawn", c_spawn},   {"despawn", c_despawn}, {"add", c_add},
    {"set", c_set},       {"remove", c_remove},   {"apply", c_apply},
    {"clear", c_clear},   {"resolved", c_resolved}, {"count", c_count},
    {NULL, NULL},
};

static const luaL_Reg commands_meta[] = {
    {"__tostring", c_tostring},
    {NULL, NULL},
};

/* Makes the registry's counter key (0: no tag handed out yet) when it is not there, so that
 * next_tag only ever changes its value. */
static void make_counter(lua_State *L, const char *key) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TNIL) {
        lua_pushinteger(L, 0);
        lua_setfield(L, LUA_REGISTRYINDEX, key);
    }
    lua_pop(L, 1);
}

void klua_open_commands(lua_State *L) {
    klua_createmeta(L, KLUA_COMMANDS, commands_methods, commands_meta);
    make_counter(L, KLUA_REG_TAGS);
}

void klua_commands_prepare_mods(lua_State *L) { make_counter(L, KLUA_REG_MOD_TAGS); }
