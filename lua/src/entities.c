/* entities.c: World methods over entities and their components: spawn, despawn, add, remove,
 * has, get, set, changed_tick. Every method checks all of its arguments and converts every
 * value before it touches the world, so an error leaves nothing half-done. */
#include <stdio.h>
#include <string.h>

#include "klua.h"

#define SPAWN_MAX 64 /* components in one spawn */

/* The World of a hot method (unheld, klua.h rule 3a), its arguments padded with nil up to
 * stack index n only: what it reads past them reads as nil, and no other slot is filled. */
static klua_world *self_args(lua_State *L, int n) {
    klua_world *kw = klua_self_plain(L);
    if (lua_gettop(L) < n) lua_settop(L, n);
    return kw;
}

/* The entity at arg: an integer is taken as it is (a negative one, or anything else, goes
 * through klua_check_entity, which takes an integral float or raises). */
static kiln_entity arg_entity(lua_State *L, int arg, const char *fname) {
    lua_Integer id = lua_isinteger(L, arg) ? lua_tointeger(L, arg) : -1;
    return id >= 0 ? (kiln_entity)id : klua_check_entity(L, arg, fname);
}

/* Converts the fields named in the table at (absolute) idx into buf, over what buf holds,
 * without raising or creating anything (rule 3a): false at the first field the general
 * conversion would refuse (it makes a message) or, with charged, charge a budget for (a long
 * array), so that it runs instead, held, and names it. */
static bool fields_fast(lua_State *L, klua_world *kw, const klua_comp *cc, int idx, uint8_t *buf, bool charged) {
    const kiln_component_info *info = &cc->info;
    lua_pushnil(L);
    const char *const *keys = kw->key_ptrs + cc->key0;
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) return false;
        const char *name = lua_tostring(L, -2);
        const kiln_field *f = NULL;
        for (int32_t i = 0; i < info->field_count && !f; i++) /* by the interned name's address */
            if (keys[i] == name) f = &info->fields[i];
        if (!f && !(f = klua_comp_field(L, kw, cc, -2))) return false;
        if (f->type == KILN_TYPE_FLOAT && f->count == 1) {
            if (lua_type(L, -1) != LUA_TNUMBER) return false;
            lua_Number v = lua_tonumber(L, -1);
            if (isfinite(v) && fabs(v) > 3.4028234663852886e38) return false;
            float x = (float)v;
            memcpy(buf + f->offset, &x, 4);
        } else if ((charged && f->count > KLUA_SHORT_ARRAY && f->type != KILN_TYPE_CHAR) ||
                   klua_to_field(L, -1, f, buf)) {
            return false;
        }
        lua_pop(L, 1);
    }
    return true;
}

/* Converts the value at (absolute) idx for data component cc (a table of fields, or true for a tag)
 * into buf without raising: false when anything is off (a bad field, a value that needs a
 * message), so the general path runs and raises as it always did. Creates nothing. */
static bool convert_fast(lua_State *L, klua_world *kw, const klua_comp *cc, int idx, uint8_t *buf) {
    const kiln_component_info *info = &cc->info;
    if (info->size == 0) return lua_isboolean(L, idx) && lua_toboolean(L, idx);
    if (!lua_istable(L, idx) || info->field_count == 0) return false;
    klua_default_value(info, buf);
    return fields_fast(L, kw, cc, idx, buf, false);
}

/* world:spawn's common case: no mod, every component a data component or tag (no Lua values)
 * whose cache entry is made. Converts each value while the table is traversed (the values go
 * to the scratch, and nothing that runs creates an object: rule 3a). Component errors raise as
 * in the general path (same traversal order); anything else returns false with the stack as
 * given, and the general path starts over. */
static bool spawn_fast(lua_State *L, klua_world *kw, const char *fname, kiln_entity *e) {
    kiln_component comps[SPAWN_MAX];
    uint32_t offs[SPAWN_MAX];
    int32_t n = 0;
    size_t total = 0;
    int top = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (n == SPAWN_MAX) break;
        kiln_component c = klua_check_component(L, kw, -2, 2, fname);
        if (kw->current) klua_check_access(L, kw, c, true, fname);
        const klua_comp *cc = klua_comp_ready(kw, c);
        if (!cc || cc->info.owner || klua_is_lua_valued(kw, c)) break; /* (an owner mark: see below) */
        size_t off = total;
        total += (cc->info.size + 15) & ~(size_t)15;
        /* the Lua allocator: runs no collector */
        uint8_t *base = total + 16 > kw->scratch_size ? klua_scratch(L, kw, total)
                                                      : (uint8_t *)(((uintptr_t)kw->scratch + 15) & ~(uintptr_t)15);
        if (!convert_fast(L, kw, cc, top + 2, base + off)) break;
        comps[n] = c;
        offs[n++] = (uint32_t)off;
        lua_pop(L, 1);
    }
    if (lua_gettop(L) != top) { /* stopped early: the general path decides */
        lua_settop(L, top);
        return false;
    }
    uint8_t *base = klua_scratch(L, kw, total);
    const void *values[SPAWN_MAX];
    for (int32_t i = 0; i < n; i++) values[i] = base + offs[i];
    if (kiln_spawn_with(kw->world, comps, values, n, e) != KILN_OK) klua_fail_world(L, kw->world, fname);
    return true;
}

/* world:spawn{Name = value, ...}. Unheld (klua.h, rule 3a): the values are copied onto the
 * stack while the table is traversed, so converting them into the scratch creates nothing. */
static int w_spawn(lua_State *L) {
    klua_world *kw = klua_self_plain(L);
    const char *fname = "world:spawn";
    kiln_entity e;
    if (!kw->mod_hooks && lua_istable(L, 2) && spawn_fast(L, kw, fname, &e)) {
        lua_pushinteger(L, (lua_Integer)e);
        return 1;
    }
    /* a message the fast path made may have run a finalizer that closed the world */
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    if (lua_gettop(L) < KLUA_ARG_PAD) lua_settop(L, KLUA_ARG_PAD);
    kiln_component comps[SPAWN_MAX + 1]; /* + a mod's tag */
    kiln_component_info infos[SPAWN_MAX];
    int32_t n = 0;
    size_t total = 0;
    int64_t held = 0; /* what the row will hold: values and their ticks (a mod's budget) */
    int vbase = lua_gettop(L) + 1; /* value i sits at vbase + i */
    if (!lua_isnoneornil(L, 2)) {
        if (!lua_istable(L, 2)) klua_typeerror(L, 2, fname, "table");
        luaL_checkstack(L, SPAWN_MAX + 8, "too many components");
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            if (n == SPAWN_MAX) klua_argerror(L, 2, fname, "at most %d components at once", SPAWN_MAX);
            comps[n] = klua_check_component(L, kw, -2, 2, fname);
            klua_check_access(L, kw, comps[n], true, fname);
            kiln_component_info_get(kw->world, comps[n], &infos[n]);
            if (klua_is_mod_tag(&infos[n])) klua_argerror(L, 2, fname, KLUA_MOD_TAG_REFUSED, infos[n].name);
            total += (infos[n].size + 15) & ~(size_t)15;
            if (infos[n].size) held += (int64_t)(infos[n].stride + sizeof(kiln_row_tick));
            n++;
            lua_insert(L, -2); /* the value stays, below the key */
        }
        /* the schema cache the fast path needs, made now that nothing is held (rule 3a) */
        for (int32_t i = 0; i < n && !kw->mod_hooks; i++) klua_comp_get(L, kw, comps[i]);
    }
    /* infos point into the world: converting makes messages (and strings, from numbers) whose
     * collector step could run a finalizer that closes it (the slow path only: held) */
    klua_hold_gc(L, kw);
    /* A mod's entities carry its tag (the hook raises when the mod may spawn no more). */
    kiln_component tag = kw->mod_hooks ? kw->mod_hooks->before_spawn(L, kw, held, comps, n) : KILN_NO_COMPONENT;
    /* Values: converted into the world's scratch, one 16-byte-aligned slot each. */
    uint8_t *base = total ? klua_scratch(L, kw, total) : NULL;
    const void *values[SPAWN_MAX + 1];
    /* Data values first (they may raise); Lua values take refs last, when nothing can fail.
     * Each pass goes by component id, not in the init table's order (the interpreter's), so an
     * init with several bad values names the same one under Lua 5.4 and LuaJIT. */
    int32_t order[SPAWN_MAX];
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        values[i] = base ? base + off : NULL; /* no scratch when every term is a tag */
        off += (infos[i].size + 15) & ~(size_t)15;
        int32_t j = i;
        for (; j > 0 && comps[order[j - 1]] > comps[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t k = 0; k < n; k++) {
            int32_t i = order[k];
            if (klua_is_lua_valued(kw, comps[i]) == (pass == 1))
                klua_build_value(L, kw, comps[i], vbase + i, (uint8_t *)(uintptr_t)values[i], &infos[i], fname, 0);
        }
    }
    int32_t with_tag = n;
    if (tag != KILN_NO_COMPONENT) {
        bool listed = false;
        for (int32_t i = 0; i < n; i++) listed = listed || comps[i] == tag;
        if (!listed) {
            comps[with_tag] = tag;
            values[with_tag++] = NULL;
        }
    }
    if (kiln_spawn_with(kw->world, comps, values, with_tag, &e) != KILN_OK) {
        for (int32_t i = 0; i < n; i++) klua_unref_value(L, kw, comps[i], values[i]);
        klua_fail_world(L, kw->world, fname);
    }
    if (tag != KILN_NO_COMPONENT) kw->mod_hooks->after_spawn(L, kw, e);
    lua_pushinteger(L, (lua_Integer)e);
    return 1;
}

static int w_despawn(lua_State *L) {
    klua_world *kw = self_args(L, 2);
    kiln_entity e = arg_entity(L, 2, "world:despawn");
    if (kw->mod_hooks) kw->mod_hooks->before_remove(L, kw, e, KILN_NO_COMPONENT, "world:despawn");
    kiln_result r = kw->host ? klua_mod_despawn(kw, e, false) : kiln_despawn(kw->world, e); /* a mod's: as it lands too */
    if (r != KILN_OK) klua_fail_world(L, kw->world, "world:despawn");
    if (kw->mod_hooks) kw->mod_hooks->queued(kw);
    return 0;
}

/* world:is_alive(x): false for anything that is not a live entity, never an error. */
static int w_is_alive(lua_State *L) {
    klua_world *kw = self_args(L, 2);
    int ok = 0;
    lua_Integer v = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
    lua_pushboolean(L, ok && v > 0 && kiln_is_alive(kw->world, (kiln_entity)v));
    return 1;
}

static int w_count(lua_State *L) {
    klua_world *kw = klua_self_plain(L);
    lua_pushinteger(L, (lua_Integer)kiln_entity_count(kw->world));
    return 1;
}

/* Unheld (rule 3a): the buffer and the list are made first, then filled. Making them may run
 * a finalizer that closes the world or spawns or despawns: the entities are counted again
 * after, and a list made too small is made again. */
static int w_entities(lua_State *L) {
    klua_world *kw = klua_self_unheld(L);
    kiln_world_stats st; /* the list walks every archetype of the world */
    kiln_world_stats_get(kw->world, &st);
    klua_budget_walk(L, st.archetypes, "world:entities");
    int top = lua_gettop(L);
    int64_t n = kiln_world_entities(kw->world, NULL, 0), got;
    kiln_entity *list;
    for (;;) {
        list = lua_newuserdatauv(L, sizeof(kiln_entity) * (size_t)(n ? n : 1), 0);
        lua_createtable(L, (int)n, 0);
        if (kw->closed) luaL_error(L, "attempt to use a closed world");
        got = kiln_world_entities(kw->world, list, n);
        if (got <= n) break;
        lua_settop(L, top);
        n = got;
    }
    for (int64_t i = 0; i < got; i++) {
        lua_pushinteger(L, (lua_Integer)list[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Arguments 2 and 3 of a method on one entity's component: the entity and the component,
 * with the running system's access to it checked (write or read), and a mod's write anywhere
 * (what is read-only to mods); the host's code outside systems checks nothing. */
static kiln_component entity_component(lua_State *L, klua_world *kw, const char *fname, bool write,
                                       kiln_entity *e) {
    *e = arg_entity(L, 2, fname);
    kiln_component c = klua_check_component(L, kw, 3, 3, fname);
    if (kw->current || (write && kw->host)) klua_check_access(L, kw, c, write, fname);
    return c;
}

/* c's schema cache entry, for world:add and world:remove: raises (argument 3) when c is a mod's
 * tag, which only its manager puts on or takes off. Makes strings the first time. */
static inline const klua_comp *comp_not_tag(lua_State *L, klua_world *kw, kiln_component c, const char *fname) {
    const klua_comp *cc = klua_comp_ready(kw, c);
    if (!cc) cc = klua_comp_get(L, kw, c);
    if (klua_is_mod_tag(&cc->info)) klua_argerror(L, 3, fname, KLUA_MOD_TAG_REFUSED, cc->info.name);
    return cc;
}

/* After a fast conversion gave up: the message a fault makes may have run a finalizer that
 * closed the world, grew its scratch or despawned the entity. Raises for a closed world, holds
 * the collector (the general conversion reads the world's fields while it makes messages) and
 * returns the scratch afresh; the caller checks the entity again. */
static uint8_t *hold_for_general(lua_State *L, klua_world *kw, size_t size) {
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    klua_hold_gc(L, kw);
    return klua_scratch(L, kw, size);
}

/* world:add's data value (argument 4) into buf, creating nothing: nil (the defaults) or a table
 * fields_fast takes. False sends it to klua_build_value, held, which converts or names the fault. */
static bool add_fast(lua_State *L, klua_world *kw, const klua_comp *cc, uint8_t *buf) {
    bool nil = lua_isnil(L, 4);
    if (!nil && (!lua_istable(L, 4) || cc->info.field_count == 0)) return false;
    klua_default_value(&cc->info, buf);
    return nil || fields_fast(L, kw, cc, 4, buf, true);
}

static int w_add(lua_State *L) {
    klua_world *kw = self_args(L, 4); /* an absent value reads as nil */
    const char *fname = "world:add";
    kiln_entity e;
    kiln_component c = entity_component(L, kw, fname, true, &e);
    if (!kiln_is_alive(kw->world, e) && !kiln_is_deferred(kw->world)) klua_check_alive(L, kw, e, fname);
    const klua_comp *cc = comp_not_tag(L, kw, c, fname); /* makes strings: before the scratch is taken */
    const kiln_component_info *info = &cc->info;
    /* info is the world's: no finalizer may close it while a value converts. A tag's converts
     * nothing and a Lua value's reads no info once it allocates; a data value is converted
     * creating nothing first, and held only for the general conversion, which makes the
     * messages (a mod's hooks hold it from here, as they run Lua-facing accounting). */
    size_t size = info->size; /* (info is read again only once the world is known open) */
    bool data = size > 0 && !klua_is_lua_valued(kw, c);
    if (data && kw->mod_hooks) klua_hold_gc(L, kw);
    bool had = kw->mod_hooks && kiln_has(kw->world, e, c); /* (only a mod's view asks) */
    if (kw->mod_hooks && !had) { /* raises past the mod's budgets */
        kw->mod_hooks->before_add(L, kw, e, c);
        if (info->size) kw->mod_hooks->before_grow(L, kw, e, c, (int64_t)(info->stride + sizeof(kiln_row_tick)), fname);
        else kw->mod_hooks->before_reshape(L, kw, e, c, true, fname);
    }
    uint8_t *val = klua_scratch(L, kw, size);
    if (!data || kw->mod_hooks || !add_fast(L, kw, cc, val)) {
        if (data && !kw->mod_hooks) val = hold_for_general(L, kw, size); /* (kiln_add checks e) */
        klua_build_value(L, kw, c, 4, val, info, fname, e);
    }
    if (kw->closed) luaL_error(L, "attempt to use a closed world"); /* by a finalizer of a Lua value's ref */
    if (kw->mod_hooks && had) kw->mod_hooks->before_change(L, kw, e, c, val, fname); /* (no Lua value to let go) */
    int64_t walked = info->has_check ? klua_links_walked(kw) : 0;
    if (kiln_add(kw->world, e, c, info->size ? val : NULL) != KILN_OK) {
        klua_unref_value(L, kw, c, val);
        if (info->has_check) klua_charge_links(L, kw, walked);
        klua_fail_world(L, kw->world, fname);
    }
    if (info->has_check) klua_charge_links(L, kw, walked);
    return 0;
}

static int w_remove(lua_State *L) {
    klua_world *kw = self_args(L, 3);
    const char *fname = "world:remove";
    kiln_entity e;
    kiln_component c = entity_component(L, kw, fname, true, &e);
    comp_not_tag(L, kw, c, fname);
    bool removed = false;
    if (kw->mod_hooks && kiln_has(kw->world, e, c)) {
        kw->mod_hooks->before_remove(L, kw, e, c, fname);
        kw->mod_hooks->before_reshape(L, kw, e, c, false, fname);
    } else if (kw->mod_hooks) { /* deferred, queued all the same */
        kw->mod_hooks->before_queue_remove(L, kw, fname);
    }
    if (kiln_remove(kw->world, e, c, &removed) != KILN_OK) klua_fail_world(L, kw->world, fname);
    if (kw->mod_hooks) kw->mod_hooks->queued(kw);
    lua_pushboolean(L, removed);
    return 1;
}

/* world:has(e, c): false for a dead or unknown entity (any integer is accepted). */
static int w_has(lua_State *L) {
    klua_world *kw = self_args(L, 3);
    const char *fname = "world:has";
    int ok = 0;
    lua_Integer v = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
    if (!ok) klua_typeerror(L, 2, fname, "entity");
    kiln_component c = klua_check_component(L, kw, 3, 3, fname);
    klua_check_access(L, kw, c, false, fname);
    lua_pushboolean(L, v > 0 && kiln_has(kw->world, (kiln_entity)v, c));
    return 1;
}

/* world:get(e, name [, into]): a new table, or the fields written into the table into.
 * Unheld (rule 3a): the component's bytes are copied out of the world before any table or
 * string is made from them. The arguments are not padded: an absent into reads as none. */
static int w_get(lua_State *L) {
    klua_world *kw = self_args(L, 3);
    const char *fname = "world:get";
    kiln_entity e;
    kiln_component c = entity_component(L, kw, fname, false, &e);
    bool into = lua_type(L, 4) > LUA_TNIL;
    if (into && !lua_istable(L, 4)) klua_typeerror(L, 4, fname, "table or nil");
    const klua_comp *cc = klua_comp_ready(kw, c);
    if (!cc) cc = klua_comp_get(L, kw, c); /* makes strings: before kiln_get */
    const kiln_component_info *info = &cc->info;
    uint8_t local[512];
    uint8_t *copy = local;
    if (info->size > sizeof local) {
        copy = lua_newuserdatauv(L, info->size, 0);
        if (kw->closed) luaL_error(L, "attempt to use a closed world"); /* by a finalizer */
    }
    const void *data = kiln_get(kw->world, e, c);
    if (!data) {
        klua_check_alive(L, kw, e, fname);
        if (!kiln_has(kw->world, e, c)) {
            lua_pushnil(L);
            return 1;
        }
    }
    if (info->size == 0 || !data || klua_is_lua_valued(kw, c)) {
        klua_push_value(L, kw, c, data); /* creates nothing from the world's bytes */
        return 1;
    }
    memcpy(copy, data, info->size);
    klua_fill_keyed(L, kw, cc, into ? 4 : 0, copy);
    if (into) lua_pushvalue(L, 4);
    return 1;
}

/* Writes the reflected fields named in the table at idx from val into dst, in place: owned
 * memory behind unreflected bytes is never duplicated or destroyed. */
static void write_named_fields(lua_State *L, int idx, const kiln_component_info *info,
                               const uint8_t *val, uint8_t *dst) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const kiln_field *f = klua_find_field(info, lua_tostring(L, -2));
        size_t bytes = kiln_type_size(f->type) * f->count;
        memcpy(dst + f->offset, val + f->offset, bytes);
        lua_pop(L, 1);
    }
}

/* The bytes of e's component c, for world:set: raises when e is not alive or has no c. */
static const void *set_target(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const char *name,
                              const char *fname) {
    klua_check_alive(L, kw, e, fname);
    char eb[24];
    if (!kiln_has(kw->world, e, c)) klua_fail(L, fname, "entity %s has no %s", klua_entity_str(e, eb), name);
    return kiln_get(kw->world, e, c);
}

static int w_set(lua_State *L) {
    klua_world *kw = self_args(L, 4); /* an absent value reads as nil */
    const char *fname = "world:set";
    kiln_entity e;
    kiln_component c = entity_component(L, kw, fname, true, &e);
    const klua_comp *cc = klua_comp_ready(kw, c);
    if (!cc) cc = klua_comp_get(L, kw, c); /* makes strings: before anything is read */
    const kiln_component_info *info = &cc->info;
    set_target(L, kw, e, c, info->name, fname);
    if (klua_is_lua_valued(kw, c)) {
        /* Replace the Lua value: a new ref, then the old one released. */
        int32_t *slot = kiln_get_mut(kw->world, e, c);
        int32_t ref = klua_value_ref(L, kw, 4);
        int32_t old = *slot;
        *slot = ref;
        klua_unref_value(L, kw, c, &old);
        return 0;
    }
    if (info->size == 0) return 0;
    if (info->field_count == 0) klua_fail(L, fname, "%s has no reflected fields to set from Lua", info->name);
    /* Convert into a copy (every field checked), then write only the fields named. info's
     * fields are the world's: converted creating nothing first; the general conversion, which
     * makes messages (whose collector step could run a finalizer that closes the world), holds. */
    size_t size = info->size; /* (info is read again only once the world is known open) */
    uint8_t *val = klua_scratch(L, kw, size);
    memcpy(val, kiln_get(kw->world, e, c), size);
    if (kw->mod_hooks || !lua_istable(L, 4) || !fields_fast(L, kw, cc, 4, val, true)) {
        val = hold_for_general(L, kw, size);
        /* what the fast pass wrote goes */
        memcpy(val, set_target(L, kw, e, c, info->name, fname), size);
        klua_read_fields(L, 4, info, val, fname, e);
    }
    if (kw->mod_hooks) kw->mod_hooks->before_change(L, kw, e, c, val, fname);
    /* In-place writes skip the core's check hook: ask it first (Parent refuses cycles). */
    if (info->has_check) {
        int64_t walked = klua_links_walked(kw);
        kiln_result r = kiln_component_check(kw->world, e, c, val);
        klua_charge_links(L, kw, walked);
        if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    }
    write_named_fields(L, 4, info, val, kiln_get_mut(kw->world, e, c));
    return 0;
}

static int w_changed_tick(lua_State *L) {
    klua_world *kw = self_args(L, 3);
    const char *fname = "world:changed_tick";
    kiln_entity e;
    kiln_component c = entity_component(L, kw, fname, false, &e);
    klua_check_alive(L, kw, e, fname);
    lua_pushinteger(L, kiln_changed_tick(kw->world, e, c));
    return 1;
}

/* ---- world:getter(name, field): a closure reading one field, for hot loops ---- */

typedef struct getter_state {
    klua_world *kw;                      /* kept alive by upvalue GETTER_UPV_WORLD */
    kiln_component c;
    kiln_field field;                    /* name and layout: owned by the world */
    char fname[2 * KILN_MAX_NAME + 8];   /* "get Position.x", the name errors give */
} getter_state;

enum { GETTER_UPV_WORLD = 1, GETTER_UPV_STATE };

/* get(e) -> the field's value, nil when e lacks the component; raises when e is not alive.
 * Unheld (rule 3a): a scalar is pushed straight from the column, a vector, matrix or array
 * is copied out first. */
static int getter_call(lua_State *L) {
    const getter_state *g = lua_touserdata(L, lua_upvalueindex(GETTER_UPV_STATE));
    klua_world *kw = g->kw;
    if (kw->closed) return luaL_error(L, "attempt to use a closed world");
    lua_Integer id = lua_isinteger(L, 1) ? lua_tointeger(L, 1) : -1;
    kiln_entity e = id >= 0 ? (kiln_entity)id : klua_check_entity(L, 1, g->fname); /* a float, or raises */
    if (kw->current) klua_check_access(L, kw, g->c, false, g->fname);
    const uint8_t *data = kiln_get(kw->world, e, g->c);
    if (!data) {
        klua_check_alive(L, kw, e, g->fname);
        lua_pushnil(L);
        return 1;
    }
    const kiln_field *f = &g->field;
    if (f->type == KILN_TYPE_FLOAT && f->count <= 1) {
        float v;
        memcpy(&v, data + f->offset, 4);
        lua_pushnumber(L, v);
        return 1;
    }
    bool scalar = f->count <= 1 && f->type != KILN_TYPE_CHAR && f->type != KILN_TYPE_VEC2 &&
                  f->type != KILN_TYPE_VEC3 && f->type != KILN_TYPE_VEC4 &&
                  f->type != KILN_TYPE_QUAT && f->type != KILN_TYPE_MAT4;
    if (scalar || f->type == KILN_TYPE_CHAR) { /* a string is copied as it is made */
        klua_push_field(L, f, data);
        return 1;
    }
    size_t bytes = kiln_type_size(f->type) * f->count;
    uint8_t local[1024];
    kiln_field moved = *f;
    moved.offset = 0;
    if (bytes > sizeof local) {
        klua_hold_gc(L, kw);
        klua_push_field(L, f, data);
        return 1;
    }
    memcpy(local, data + f->offset, bytes);
    klua_push_field(L, &moved, local);
    return 1;
}

static int w_getter(lua_State *L) {
    klua_world *kw = klua_self_unheld(L);
    const char *fname = "world:getter";
    kiln_component c = klua_check_component(L, kw, 2, 2, fname);
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    if (lua_type(L, 3) != LUA_TSTRING) klua_typeerror(L, 3, fname, "field name");
    size_t len;
    const char *name = lua_tolstring(L, 3, &len);
    const kiln_field *f = klua_is_lua_valued(kw, c) ? NULL : klua_field_named(L, &info, 3);
    if (!f)
        klua_argerror(L, 3, fname, "%s has no field '%s'", info.name, klua_quote(L, name, len));
    lua_pushvalue(L, 1);
    getter_state *g = lua_newuserdatauv(L, sizeof *g, 0);
    if (kw->closed) luaL_error(L, "attempt to use a closed world"); /* by a finalizer: f is gone */
    g->kw = kw;
    g->c = c;
    g->field = *f;
    snprintf(g->fname, sizeof g->fname, "get %s.%s", info.name, f->name);
    klua_pushcclosure_world(L, getter_call, GETTER_UPV_STATE);
    return 1;
}

static const luaL_Reg entity_methods[] = {
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
    {"changed_tick", w_changed_tick},
    {"getter", w_getter},
    {NULL, NULL},
};

void klua_open_entities(lua_State *L) { klua_addmethods(L, KLUA_WORLD, entity_methods); }
