/* hierarchy.c: World methods over the transform addon's hierarchy: set_parent, children,
 * despawn_recursive. Parent links are checked by the addon (no cycles, live parents). */
#include "kiln_transform.h"
#include "klua.h"

/* Parent's id; raises when the addon is not set up on the world (a host world whose own
 * "Parent" kept kiln_transform_init out), instead of reading ids that were never written. */
static kiln_component parent_component(lua_State *L, const klua_world *kw, const char *fname) {
    kiln_transform_ids ids;
    if (!kiln_transform_ids_get(kw->world, &ids))
        klua_fail(L, fname, "the world has no transforms (its own \"Parent\" or a failed kiln_transform_init)");
    return ids.parent;
}

int64_t klua_links_walked(const klua_world *kw) { return kiln_transform_links_walked(kw->world); }

void klua_charge_links(lua_State *L, const klua_world *kw, int64_t before) {
    /* Linking an entity with descendants checks how deep they go, which may walk its whole
     * subtree (a root of 100k children: 1.6 ms a call); charged after, as the walk is known,
     * and without raising: the change may have landed, and a call that raises changed nothing */
    int64_t walked = kiln_transform_links_walked(kw->world) - before;
    if (walked > 0) klua_budget_spend(L, (double)walked * KLUA_COST_LINK);
}

static int w_set_parent(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:set_parent";
    kiln_entity child = klua_check_entity(L, 2, fname);
    kiln_entity parent = lua_isnoneornil(L, 3) ? KILN_NULL_ENTITY : klua_check_entity(L, 3, fname);
    klua_check_access(L, kw, parent_component(L, kw, fname), true, fname);
    bool removing = false;
    if (kw->mod_hooks) { /* a mod's add or removal of Parent, as world:add and world:remove ask */
        kiln_component pc = parent_component(L, kw, fname);
        bool has = kiln_has(kw->world, child, pc);
        if (!has && parent != KILN_NULL_ENTITY) {
            kiln_component_info info;
            kiln_component_info_get(kw->world, pc, &info);
            kw->mod_hooks->before_add(L, kw, child, pc);
            kw->mod_hooks->before_grow(L, kw, child, pc, (int64_t)(info.stride + sizeof(kiln_row_tick)), fname);
        } else if (has && parent == KILN_NULL_ENTITY) {
            kw->mod_hooks->before_remove(L, kw, child, pc, fname);
            kw->mod_hooks->before_reshape(L, kw, child, pc, false, fname);
            removing = true; /* (counted in the frame's queue once it is queued) */
        } else if (has) { /* a new parent for a child that has one is a value set in place: it reshapes nothing */
            kw->mod_hooks->before_change(L, kw, child, pc, &(kiln_parent){parent}, fname);
        }
    }
    int64_t walked = klua_links_walked(kw);
    kiln_result r = kiln_transform_set_parent(kw->world, child, parent);
    if (r == KILN_OK && removing) kw->mod_hooks->queued(kw);
    klua_charge_links(L, kw, walked);
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    return 0;
}

static int w_children(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:children";
    kiln_entity e = klua_check_entity(L, 2, fname);
    klua_check_alive(L, kw, e, fname);
    klua_check_access(L, kw, parent_component(L, kw, fname), false, fname);
    int32_t n = kiln_transform_children(kw->world, e, NULL, 0);
    if (n < 0) klua_fail_world(L, kw->world, fname);
    kiln_entity *list = lua_newuserdatauv(L, sizeof(kiln_entity) * (size_t)(n ? n : 1), 0);
    /* the index caught up above; an allocation's collection may still have run finalizers */
    int32_t now = kiln_transform_children(kw->world, e, list, n);
    if (now < 0) klua_fail_world(L, kw->world, fname);
    if (now < n) n = now;
    lua_createtable(L, n, 0);
    for (int32_t i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)list[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int w_despawn_recursive(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:despawn_recursive";
    kiln_entity e = klua_check_entity(L, 2, fname);
    /* the walk reads every Parent link: a system declares it, as children asks */
    klua_check_access(L, kw, parent_component(L, kw, fname), false, fname);
    if (kw->mod_hooks) kw->mod_hooks->before_despawn_tree(L, kw, e, fname);
    kiln_result r = kw->host ? klua_mod_despawn(kw, e, true) : kiln_transform_despawn_recursive(kw->world, e);
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    if (kw->mod_hooks) kw->mod_hooks->queued(kw);
    return 0;
}

static const luaL_Reg hierarchy_methods[] = {
    {"set_parent", w_set_parent},
    {"children", w_children},
    {"despawn_recursive", w_despawn_recursive},
    {NULL, NULL},
};

void klua_open_hierarchy(lua_State *L) { klua_addmethods(L, KLUA_WORLD, hierarchy_methods); }
