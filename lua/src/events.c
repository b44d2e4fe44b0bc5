/* events.c: World methods over events: event (define a type), emit, events (read what was
 * emitted). Event types are defined from C schemas; their values are plain tables. */
#include <string.h>

#include "klua.h"

/* The event step closure's upvalues. */
enum { EVENTS_UPV_WORLD = 1, EVENTS_UPV_TYPE, EVENTS_UPV_NEXT };

static kiln_event_type check_event(lua_State *L, klua_world *kw, int arg, const char *fname) {
    if (lua_type(L, arg) != LUA_TSTRING) klua_typeerror(L, arg, fname, "event name");
    size_t n;
    const char *name = lua_tolstring(L, arg, &n);
    kiln_event_type t = kiln_event_lookup(kw->world, name);
    if (!t.id) klua_argerror(L, arg, fname, "unknown event '%s'", klua_quote(L, name, n));
    return t;
}

static int w_event(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, klua_define(L, kw, true, "world:event"));
    return 1;
}

static int w_emit(lua_State *L) {
    lua_settop(L, 3);
    klua_world *kw = klua_self(L);
    const char *fname = "world:emit";
    kiln_event_type t = check_event(L, kw, 2, fname);
    kiln_component_info info;
    kiln_event_info_get(kw->world, t, &info);
    /* raises past the mod's budget; the record an emit is queued in counts too (a mod's
     * systems emitting events without fields, counted as nothing, held 220 MB a frame) */
    if (kw->mod_hooks)
        kw->mod_hooks->before_grow(L, kw, KILN_NULL_ENTITY, 0, (int64_t)info.size + KLUA_EMIT_RECORD_BYTES, fname);
    uint8_t *val = klua_scratch(L, kw, info.size);
    memset(val, 0, info.size);
    if (!lua_isnoneornil(L, 3)) {
        if (info.size == 0) klua_argerror(L, 3, fname, "event %s carries no fields", info.name);
        klua_read_fields(L, 3, &info, val, fname, 0);
    }
    kiln_commands *queue = kw->mod_hooks ? kw->mod_hooks->emits(L, kw) : NULL; /* a mod's top level */
    if (queue && kiln_commands_emit(queue, t, val) != KILN_OK) klua_fail(L, fname, "%s", kiln_commands_error(queue));
    if (!queue && kiln_event_emit(kw->world, t, val) != KILN_OK) klua_fail_world(L, kw->world, fname);
    return 0;
}

static int events_step(lua_State *L) {
    klua_world *kw = klua_check_world(L, lua_upvalueindex(EVENTS_UPV_WORLD));
    klua_hold_gc(L, kw);
    kiln_event_type t = {(uint32_t)lua_tointeger(L, lua_upvalueindex(EVENTS_UPV_TYPE))};
    lua_Integer i = lua_tointeger(L, lua_upvalueindex(EVENTS_UPV_NEXT));
    const void *ev = kiln_event_get(kw->world, t, i);
    if (!ev) return 0;
    lua_pushinteger(L, i + 1);
    lua_replace(L, lua_upvalueindex(EVENTS_UPV_NEXT));
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
    klua_pushcclosure_world(L, events_step, EVENTS_UPV_NEXT);
    return 1;
}

static const luaL_Reg event_methods[] = {
    {"event", w_event},
    {"emit", w_emit},
    {"events", w_events},
    {NULL, NULL},
};

void klua_open_events(lua_State *L) { klua_addmethods(L, KLUA_WORLD, event_methods); }
