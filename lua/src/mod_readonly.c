/* mod_readonly.c: the components and resources a host keeps read-only to mods (kiln.mods'
 * readonly): every mod reads them, none writes, adds, removes, sets or despawns what holds one.
 * Invariant: only a mod's view (kw->host set) asks, so the host's own paths never look. */
#include <string.h>

#include "kiln_transform.h"
#include "mods.h"

/* Reads opts.readonly (the table at opts) into names, NULL-terminated: a list of strings,
 * anchored by that table while the caller holds it. Returns names, or NULL without the key. */
const char *const *klua_mods_readonly_option(lua_State *L, int opts, const char **names, const char *fname) {
    int t = lua_getfield(L, opts, "readonly");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    if (t != LUA_TTABLE) klua_argerror(L, opts, fname, "readonly must be a list of component names");
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n > KLUA_MODS_MAX_READONLY)
        klua_argerror(L, opts, fname, "readonly lists more than %d names", KLUA_MODS_MAX_READONLY);
    lua_Integer keys = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) { /* a list and nothing else: a key past it, or a hole, would be overlooked */
        lua_Integer i = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : 0;
        if (i < 1 || i > n || lua_type(L, -1) != LUA_TSTRING)
            klua_argerror(L, opts, fname, "readonly must be a list of component names");
        names[i - 1] = lua_tostring(L, -1);
        keys++;
        lua_pop(L, 1);
    }
    if (keys != n) klua_argerror(L, opts, fname, "readonly must be a list of component names");
    names[n] = NULL;
    lua_pop(L, 1); /* (the strings stay: opts holds the list) */
    return names;
}

/* The host's component name (len bytes) in *dest; returns NULL, or why it cannot be read-only
 * to mods (*dest KILN_NO_COMPONENT): the world has none of that name (or it is kiln's), or a mod
 * registered it, under this manager or an earlier one, and the host never declared it (its
 * schema is the mod's). */
static const char *refusal(const klua_world *kw, const char *name, size_t len, kiln_component *dest) {
    kiln_component c = klua_name_ok(name, len) ? kiln_component_lookup(kw->world, name) : KILN_NO_COMPONENT;
    *dest = KILN_NO_COMPONENT;
    if (c == KILN_NO_COMPONENT || c == kw->shared_type) return "is not a component of the world";
    if (klua_mod_registered(kw, c) && !klua_host_declared(kw, c)) return "was registered by a mod, not the host";
    *dest = c;
    return NULL;
}

int32_t klua_mods_readonly_resolve(lua_State *L, klua_world *kw, const char *const *names, kiln_component *dest) {
    int32_t n = 0;
    for (; names && names[n]; n++) {
        if (n == KLUA_MODS_MAX_READONLY)
            klua_fail(L, "kiln.mods", "readonly lists more than %d names", KLUA_MODS_MAX_READONLY);
        size_t len = strlen(names[n]);
        /* decided now, once: a name registered later (by a mod) would be the mod's before it was the host's */
        const char *why = refusal(kw, names[n], len, &dest[n]);
        if (why)
            klua_fail(L, "kiln.mods", "readonly names '%s', which %s; register it before the mod manager opens",
                      klua_quote(L, names[n], len), why);
    }
    return n;
}

/* Pushes why c cannot be read-only to mods now: a running mod's system lists it in writes
 * (the first found); returns false when none does. */
static bool declared_by_mod(lua_State *L, klua_mods *mods, kiln_component c, const char *cname, const char *fname) {
    for (int i = 0; i < mods->count; i++) {
        klua_mod *mod = mods->list[i];
        if (mod->status != KLUA_MOD_RUNNING || !mod->L || !mod->kw) continue;
        for (const klua_system *s = mod->kw->systems; s; s = s->next)
            for (int k = 0; k < s->write_count; k++)
                if (s->writes[k] == c) {
                    lua_pushfstring(L, "%s: system '%s' of mod '%s' lists %s in writes; unload the mod, or make %s "
                                    "read-only before loading it (nothing was made read-only)", fname, s->name,
                                    mod->name, cname, cname);
                    return true;
                }
    }
    return false;
}

int klua_mods_readonly_add(lua_State *L, klua_mods *mods, const char *fname) {
    klua_world *kw = mods->kw;
    int last = lua_gettop(L);
    if (last < 2) klua_typeerror(L, 2, fname, "string");
    kiln_component list[KLUA_MODS_MAX_READONLY];
    int32_t n = mods->readonly_count;
    memcpy(list, mods->readonly, sizeof(kiln_component) * (size_t)n);
    for (int arg = 2; arg <= last; arg++) { /* every name checked before any is added */
        if (lua_type(L, arg) != LUA_TSTRING) klua_typeerror(L, arg, fname, "string");
        size_t len;
        const char *name = lua_tolstring(L, arg, &len);
        kiln_component c;
        const char *why = refusal(kw, name, len, &c);
        if (why) klua_argerror(L, arg, fname, "'%s' %s", klua_quote(L, name, len), why);
        bool listed = false;
        for (int32_t i = 0; i < n && !listed; i++) listed = list[i] == c;
        if (listed) continue;
        if (n == KLUA_MODS_MAX_READONLY)
            klua_argerror(L, arg, fname, "more than %d names would be read-only to mods", KLUA_MODS_MAX_READONLY);
        if (declared_by_mod(L, mods, c, name, fname)) { /* a loaded mod's: the host decides, nothing changes */
            lua_pushnil(L);
            lua_insert(L, -2);
            return 2;
        }
        list[n++] = c;
    }
    memcpy(mods->readonly, list, sizeof(kiln_component) * (size_t)n);
    mods->readonly_count = n;
    lua_pushboolean(L, 1);
    return 1;
}

bool klua_mod_readonly(const klua_world *kw, kiln_component c) {
    const klua_mods *mods = ((const klua_mod *)kw->mod)->mods;
    for (int32_t i = 0; i < mods->readonly_count; i++)
        if (mods->readonly[i] == c) return true;
    return false;
}

void klua_mod_check_write(lua_State *L, klua_world *kw, kiln_component c, const char *fname) {
    if (!klua_mod_readonly(kw, c)) return;
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    klua_fail(L, fname, "%s is read-only to mods (the host lists it in kiln.mods' readonly)", info.name);
}

/* kiln_despawn (tree: kiln_transform_despawn_recursive) in a mod's view kw: refused while the entity
 * holds what is read-only to mods, now and, queued, again as it lands (a host's add queued before
 * it in the frame may bring one). */
kiln_result klua_mod_despawn(const klua_world *kw, kiln_entity e, bool tree) {
    const klua_mods *mods = ((const klua_mod *)kw->mod)->mods;
    /* the list is copied into a queued despawn: mods:readonly or a closed manager changes none */
    if (tree) return kiln_transform_despawn_recursive_unless(kw->world, e, mods->readonly, mods->readonly_count);
    return kiln_despawn_unless(kw->world, e, mods->readonly, mods->readonly_count);
}

bool klua_mods_any_readonly(const klua_world *kw) { return ((const klua_mod *)kw->mod)->mods->readonly_count > 0; }

void klua_mod_check_despawn(lua_State *L, klua_world *kw, kiln_entity e, const char *fname) {
    const klua_mods *mods = ((const klua_mod *)kw->mod)->mods;
    for (int32_t i = 0; i < mods->readonly_count; i++) {
        if (!kiln_has(kw->world, e, mods->readonly[i])) continue;
        kiln_component_info info;
        kiln_component_info_get(kw->world, mods->readonly[i], &info);
        char eb[24];
        klua_fail(L, fname, "entity %s holds %s, which is read-only to mods (the host lists it in kiln.mods' "
                  "readonly): no mod may despawn it", klua_entity_str(e, eb), info.name);
    }
}
