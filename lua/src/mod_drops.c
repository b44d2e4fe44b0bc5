/* mod_drops.c: the queued changes of mods that the world dropped as they landed, told apart by
 * mod. Invariant: what a mod keeps of them is a count and one message, however many drop. */
#include <stdio.h>

#include "mods.h"

/* The mod a dropped change was queued by: the one running the system whose buffer held it (a
 * call into another mod's export is the system's work), or for the world's queue the one
 * whose left-open loops kiln is ending (its code queued what they held, though none of it runs
 * now), else the one whose code runs now (a loop's end in a top level, an export, an exclusive
 * system); NULL for the host's. */
static klua_mod *drop_owner(klua_mods *mods, const char *system) {
    if (!system && mods->landing) return mods->landing;
    for (int i = 0; i < mods->count; i++) {
        klua_mod *mod = mods->list[i];
        if (system ? klua_mod_runs(mod, system) : mod->mem.depth > 0) return mod;
    }
    return system || !mods->loading ? NULL : mods->loading;
}

/* The world's drop hook while the manager is open: books the drop to its mod (C only: it runs
 * mid-apply, where no Lua may run), then calls on to the hook it replaced. */
static void hook_drop(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx) {
    klua_mods *mods = ctx;
    klua_mod *mod = mods->closed ? NULL : drop_owner(mods, system);
    if (mod) {
        mod->dropped++;
        snprintf(mod->dropped_error, sizeof mod->dropped_error, "%s", message);
    }
    if (mods->drop_prev) mods->drop_prev(world, system, code, message, mods->drop_prev_ctx);
}

void klua_mods_watch_drops(klua_mods *mods) {
    kiln_world_drop_hook_set(mods->kw->world, hook_drop, mods, &mods->drop_prev, &mods->drop_prev_ctx);
}

void klua_mods_unwatch_drops(klua_mods *mods) {
    if (mods->kw->closed) return; /* the world is gone, and its hook with it */
    kiln_drop_fn fn;
    void *ctx;
    kiln_world_drop_hook_set(mods->kw->world, mods->drop_prev, mods->drop_prev_ctx, &fn, &ctx);
    if (fn != hook_drop || ctx != mods) /* set over the manager's: that one stays */
        kiln_world_drop_hook_set(mods->kw->world, fn, ctx, NULL, NULL);
}

static int end_loops_thunk(lua_State *L) {
    klua_world *kw = lua_touserdata(L, 1);
    klua_query_close_loops(L, kw, kw->current, false);
    return 0;
}

void klua_mods_end_loops(klua_mods *mods, lua_State *L, klua_world *kw, klua_mod *owner) {
    int top = lua_gettop(L);
    klua_mod *was = mods->landing;
    mods->landing = owner;
    lua_pushlightuserdata(L, kw);
    (void)klua_pcall_c(L, end_loops_thunk, 1, 0, 0); /* (its error is let go: callers may not raise) */
    mods->landing = was;
    lua_settop(L, top);
}

void klua_mod_carry_drops(klua_mod *to, const klua_mod *from, bool later) {
    to->dropped += from->dropped;
    if (from->dropped_error[0] && (later || !to->dropped_error[0]))
        memcpy(to->dropped_error, from->dropped_error, sizeof to->dropped_error);
}

int64_t klua_mod_dropped(klua_world *kw, const char **message) {
    klua_mod *mod = kw->mod;
    *message = mod->dropped_error;
    return mod->dropped;
}

void klua_mod_push_drops(lua_State *L, const klua_mod *mod) {
    lua_pushinteger(L, (lua_Integer)mod->dropped);
    lua_setfield(L, -2, "dropped");
    if (!mod->dropped_error[0]) return;
    lua_pushstring(L, mod->dropped_error);
    lua_setfield(L, -2, "dropped_error");
}
