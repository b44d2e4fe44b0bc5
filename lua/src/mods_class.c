/* mods_class.c: the kiln.Mods class (kiln.mods(world, opts)); mods_embed.c calls it from C.
 * Invariant: every lifecycle method runs between frames, with the caller as the host thread. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"
#include "refs.h"

#define DEFAULT_MEMORY ((size_t)64 << 20)
#define DEFAULT_INSTRUCTIONS 10000000
#define DEFAULT_ENTITIES 1000000
#define DEFAULT_WORLD_MEMORY ((int64_t)256 << 20)
#define DEFAULT_QUERIES 256
#define DEFAULT_ARCHETYPES 8192
#define DEFAULT_COMPONENTS 4096
#define DEFAULT_SYSTEMS (KILN_SCHEDULE_MAX_SYSTEMS / 2)
enum { MODS_UV_WORLD = 1, MODS_UV_COUNT = MODS_UV_WORLD };
#define MAX_DIR_ENTRIES 256 /* entries load_dir looks at */

/* ---- the kiln.Mods class ----------------------------------------------------------------- */

/* Under LuaJIT a q:each loop left by break or return outside a system stays open until its
 * query or world is used again (jit_methods.c); it would keep the world deferred, where the
 * lifecycle methods refuse to run, though under Lua 5.4 the loop has ended: end it first, as
 * a World method does. */
static void settle_loops(lua_State *L) {
#if KLUA_LUAJIT
    if (lua_getiuservalue(L, 1, MODS_UV_WORLD) == LUA_TUSERDATA) klua_jit_settle_world(L, -1);
    lua_pop(L, 1);
#else
    (void)L;
#endif
}

static klua_mods *check_mods(lua_State *L, const char *fname) {
    klua_mods *mods = klua_check_self(L, KLUA_MODS, "mods");
    if (mods->closed) klua_fail(L, fname, "the mod manager is closed");
    if (mods->kw->closed) klua_fail(L, fname, "the world is closed");
    settle_loops(L);
    return mods;
}

/* The string at arg, refused when it holds a zero byte (a C call would see another name). */
static const char *check_text(lua_State *L, int arg, const char *fname, const char *what) {
    if (lua_type(L, arg) != LUA_TSTRING) klua_typeerror(L, arg, fname, what);
    size_t len;
    const char *s = lua_tolstring(L, arg, &len);
    if (strlen(s) != len) klua_argerror(L, arg, fname, "%s contains a zero byte", what);
    return s;
}

static const char *check_name(lua_State *L, int arg, const char *fname) {
    return check_text(L, arg, fname, "mod name");
}

/* Pushes what mods:list() shows of one mod. */
static void push_info(lua_State *L, klua_mod *mod) {
    kiln_world *world = mod->mods->kw->world;
    lua_createtable(L, 0, 12);
    lua_pushstring(L, mod->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, mod->version);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, mod->path);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, mod->status == KLUA_MOD_RUNNING ? "running" : "disabled");
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, (lua_Integer)mod->mem.used);
    lua_setfield(L, -2, "memory");
    lua_pushinteger(L, (lua_Integer)mod->mem.peak);
    lua_setfield(L, -2, "memory_peak");
    lua_newtable(L);
    kiln_schedule *sched = mod->mods->kw->schedule;
    for (int k = 0, n = 0; k < mod->system_count; k++)
        if (sched && klua_mod_runs(mod, mod->systems[k]) && kiln_schedule_find(sched, mod->systems[k]) >= 0) {
            lua_pushstring(L, mod->systems[k]);
            lua_rawseti(L, -2, ++n);
        }
    lua_setfield(L, -2, "systems");
    lua_newtable(L);
    for (int k = 0, n = 0; k < mod->declared_count; k++) {
        const char *name = NULL;
        if (mod->declared_event[k]) {
            kiln_component_info ei;
            if (kiln_event_info_get(world, (kiln_event_type){mod->declared[k]}, &ei)) name = ei.name;
        } else {
            kiln_component_info ci;
            if (kiln_component_info_get(world, mod->declared[k], &ci)) name = ci.name;
        }
        if (name) {
            lua_pushstring(L, name);
            lua_rawseti(L, -2, ++n);
        }
    }
    lua_setfield(L, -2, "components");
    lua_pushinteger(L, mod->spawned ? (lua_Integer)kiln_query_count(mod->spawned) : 0);
    lua_setfield(L, -2, "entities");
    lua_pushinteger(L, (lua_Integer)klua_mod_held_bytes(mod, world));
    lua_setfield(L, -2, "world_bytes");
    lua_pushinteger(L, mod->L && mod->kw ? mod->kw->query_count : 0);
    lua_setfield(L, -2, "queries");
    lua_pushinteger(L, (lua_Integer)klua_mod_query_bytes(mod));
    lua_setfield(L, -2, "query_bytes");
    lua_pushinteger(L, (lua_Integer)mod->failures);
    lua_setfield(L, -2, "failures");
    klua_mod_push_drops(L, mod);
    lua_newtable(L);
    for (int i = 0; i < mod->depend_count; i++) {
        lua_pushstring(L, mod->depends[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "depends");
    if (mod->error[0]) {
        lua_pushstring(L, mod->error);
        lua_setfield(L, -2, "error");
    }
}

static int push_info_call(lua_State *L) {
    push_info(L, lua_touserdata(L, 1));
    return 1;
}

/* push_info as a protected call: the info, or (not LUA_OK) the error. */
static int push_info_protected(lua_State *L, klua_mod *mod) {
    lua_pushlightuserdata(L, mod);
    return klua_pcall_c(L, push_info_call, 1, 1, 0);
}

/* t[name] = error of the n mods at 2 (a reload's failed dependents) in t at 1 (new if nil). */
static int record_failed(lua_State *L) {
    klua_mod **failed = lua_touserdata(L, 2);
    int n = (int)lua_tointeger(L, 3);
    if (lua_isnil(L, 1)) {
        lua_createtable(L, 0, n);
        lua_replace(L, 1);
    }
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, failed[i]->error);
        lua_setfield(L, 1, failed[i]->name);
    }
    lua_settop(L, 1);
    return 1;
}

/* Returns nil and "fname: msg", msg the message its caller pushed: an expected failure (the
 * files or which mods are loaded decide it), where misuse raises; both name the call. */
static int nil_and(lua_State *L, const char *fname, const char *msg) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", fname, msg);
    return 2;
}

/* nil and "fname: no mod named 'NAME' is loaded", the name cut as every quoted name is. */
static int no_mod(lua_State *L, const char *fname, const char *name) {
    return nil_and(L, fname, lua_pushfstring(L, "no mod named '%s' is loaded", klua_quote(L, name, strlen(name))));
}

/* Runs a lifecycle operation with the caller as the host thread. */
static const char *begin(lua_State *L, klua_mods *mods) {
    const char *why = klua_mods_busy(mods);
    if (!why) mods->caller = L;
    return why;
}

static int md_load(lua_State *L) {
    const char *fname = "mods:load";
    klua_mods *mods = check_mods(L, fname);
    const char *path = check_text(L, 2, fname, "path");
    if (!klua_mods_grow(mods, (void **)&mods->list, &mods->cap, mods->count + 1, sizeof *mods->list))
        return klua_no_memory(L);
    const char *why = begin(L, mods);
    if (why) klua_fail(L, fname, "%s", why);
    char err[KLUA_MOD_ERROR + 128];
    klua_mod *mod = klua_mods_load(mods, path, NULL, err, sizeof err);
    if (!mod) {
        mods->caller = NULL;
        return nil_and(L, fname, err);
    }
    mods->list[mods->count++] = mod;
    if (push_info_protected(L, mod) != LUA_OK) {
        /* no memory for the info: the load is taken back, so a call that raises has loaded nothing */
        klua_mods_take_back(mods, mod);
        mods->caller = NULL;
        return lua_error(L);
    }
    klua_mod_load_keep(mod, mods->kw->world);
    mods->caller = NULL;
    return 1;
}

/* A mod found in a folder by load_dir, with its manifest read. */
typedef struct found {
    char path[KLUA_MOD_PATH];
    struct {
        char name[KILN_MAX_NAME + 1];
        char depends[KLUA_MOD_MAX_DEPS][KILN_MAX_NAME + 1];
        int depend_count;
    } desc;
    int state; /* 0 waiting, 2 done */
    bool ok;
} found;

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The loads of mods:load_dir, in dependency order: 1 the context, 2 the loaded names, 3 the
 * failures by name. Raises only for memory (the caller takes back what it loaded). */
typedef struct load_dir_ctx {
    klua_mods *mods;
    found *list;
    int count;
    klua_mod **order; /* the mods loaded so far, in order */
    int loaded_count;
} load_dir_ctx;

static int load_found(lua_State *L) {
    load_dir_ctx *c = lua_touserdata(L, 1);
    klua_mods *mods = c->mods;
    found *list = c->list;
    int count = c->count;
    const int loaded = 2, failed = 3;
    /* depth first over depends: a missing one or a cycle fails the mod (and its dependents) */
    for (int pass = 0; pass < count; pass++) {
        for (int i = 0; i < count; i++) {
            found *f = &list[i];
            if (f->state == 2) continue;
            bool ready = true;
            const char *problem = NULL;
            for (int k = 0; k < f->desc.depend_count && !problem; k++) {
                const char *dep = f->desc.depends[k];
                int j = -1;
                for (int x = 0; x < count; x++)
                    if (strcmp(list[x].desc.name, dep) == 0) j = x;
                klua_mod *running = klua_mods_find(mods, dep);
                if (j < 0 && !running) problem = lua_pushfstring(L, "mod '%s': it depends on '%s', which is not there", f->desc.name, dep);
                else if (j >= 0 && list[j].state == 2 && !list[j].ok && !running)
                    problem = lua_pushfstring(L, "mod '%s': it depends on '%s', which failed to load", f->desc.name, dep);
                else if (j >= 0 && list[j].state != 2 && !running) ready = false;
            }
            if (problem) {
                f->state = 2;
                lua_setfield(L, failed, f->desc.name);
                continue;
            }
            if (!ready) continue;
            f->state = 2;
            char err[KLUA_MOD_ERROR + 128];
            if (!klua_mods_grow(mods, (void **)&mods->list, &mods->cap, mods->count + 1, sizeof *mods->list))
                return klua_no_memory(L);
            klua_mod *mod = klua_mods_load(mods, f->path, NULL, err, sizeof err);
            if (mod) {
                f->ok = true;
                mods->list[mods->count++] = mod;
                c->order[c->loaded_count++] = mod;
                lua_pushstring(L, mod->name);
                lua_rawseti(L, loaded, (lua_Integer)lua_rawlen(L, loaded) + 1);
            } else {
                lua_pushstring(L, err);
                lua_setfield(L, failed, f->desc.name);
            }
        }
    }
    /* what is left waits on itself: a cycle */
    for (int i = 0; i < count; i++)
        if (list[i].state != 2) {
            lua_pushfstring(L, "mod '%s': its depends form a cycle", list[i].desc.name);
            lua_setfield(L, failed, list[i].desc.name);
        }
    return 0;
}

/* mods:load_dir's reading of its folder: 1 the scan, 2 the table of names. A raise (for
 * memory) leaves the folder to the caller, which closes it either way. */
typedef struct dir_scan {
    DIR *d;
    int n;
    bool more; /* past MAX_DIR_ENTRIES */
} dir_scan;

static int scan_dir(lua_State *L) {
    dir_scan *scan = lua_touserdata(L, 1);
    struct dirent *e;
    while ((e = readdir(scan->d))) {
        if (e->d_name[0] == '.') continue;
        if (scan->n == MAX_DIR_ENTRIES) {
            scan->more = true;
            break;
        }
        lua_pushstring(L, e->d_name);
        lua_rawseti(L, 2, ++scan->n);
    }
    return 0;
}

static int md_load_dir(lua_State *L) {
    const char *fname = "mods:load_dir";
    klua_mods *mods = check_mods(L, fname);
    const char *dir = check_text(L, 2, fname, "folder");
    /* names sorted, so the order among independent mods does not depend on the file system */
    lua_newtable(L);
    int names = lua_gettop(L);
    dir_scan scan = {opendir(dir), 0, false};
    if (!scan.d) return nil_and(L, fname, lua_pushfstring(L, "cannot open folder %s", klua_quote(L, dir, strlen(dir))));
    lua_pushlightuserdata(L, &scan);
    lua_pushvalue(L, names);
    int status = klua_pcall_c(L, scan_dir, 2, 0, 0);
    closedir(scan.d); /* however the scan ended */
    if (status != LUA_OK) return lua_error(L);
    int n = scan.n;
    bool more = scan.more;
    if (more)
        return nil_and(L, fname, lua_pushfstring(L, "%s holds more than %d entries; keep mods in a folder of their own",
                                          klua_quote(L, dir, strlen(dir)), MAX_DIR_ENTRIES));
    found *list = lua_newuserdatauv(L, sizeof(found) * (size_t)(n ? n : 1), 0);
    memset(list, 0, sizeof(found) * (size_t)(n ? n : 1));
    const char **sorted = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, names, i + 1);
        sorted[i] = lua_tostring(L, -1);
        lua_pop(L, 1); /* anchored by the names table */
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_names);
    klua_mod *probe = lua_newuserdatauv(L, sizeof *probe, 0); /* for reading manifests */
    klua_mod **order = lua_newuserdatauv(L, sizeof(klua_mod *) * (size_t)(n ? n : 1), 0);
    lua_newtable(L); /* loaded names, in order */
    int loaded = lua_gettop(L);
    lua_newtable(L); /* failures by name */
    int failed = lua_gettop(L);
    int count = 0;
    for (int i = 0; i < n; i++) {
        found *f = &list[count];
        snprintf(f->path, sizeof f->path, "%s/%s", dir, sorted[i]);
        struct stat st;
        if (stat(f->path, &st) != 0) continue;
        size_t len = strlen(sorted[i]);
        if (!S_ISDIR(st.st_mode) && !(len > 4 && strcmp(sorted[i] + len - 4, ".lua") == 0)) continue;
        memset(probe, 0, sizeof *probe);
        probe->mods = mods;
        if (!klua_mod_describe(probe, f->path)) {
            lua_pushstring(L, probe->error);
            lua_setfield(L, failed, sorted[i]);
            continue;
        }
        memcpy(f->desc.name, probe->name, sizeof f->desc.name);
        memcpy(f->desc.depends, probe->depends, sizeof f->desc.depends);
        f->desc.depend_count = probe->depend_count;
        count++;
    }
    const char *why = begin(L, mods);
    if (why) klua_fail(L, fname, "%s", why);
    load_dir_ctx c = {mods, list, count, order, 0};
    lua_pushlightuserdata(L, &c);
    lua_pushvalue(L, loaded);
    lua_pushvalue(L, failed);
    if (klua_pcall_c(L, load_found, 3, 0, 0) != LUA_OK) {
        /* out of memory part way: what this call loaded is taken back, the last first (so
         * dependents before what they depend on) */
        for (int i = c.loaded_count - 1; i >= 0; i--) klua_mods_take_back(mods, c.order[i]);
        mods->caller = NULL;
        return lua_error(L);
    }
    for (int i = 0; i < c.loaded_count; i++) klua_mod_load_keep(c.order[i], mods->kw->world); /* in load order */
    mods->caller = NULL;
    lua_pushvalue(L, loaded);
    lua_pushvalue(L, failed);
    return 2;
}

/* mods:readonly(name, ...): more names no mod may change (mod_readonly.c). Between frames and
 * never from a mod's code, as a load. */
static int md_readonly(lua_State *L) {
    const char *fname = "mods:readonly";
    klua_mods *mods = check_mods(L, fname);
    const char *why = klua_mods_busy(mods);
    if (why) klua_fail(L, fname, "%s", why);
    return klua_mods_readonly_add(L, mods, fname);
}

static int md_unload(lua_State *L) {
    const char *fname = "mods:unload";
    klua_mods *mods = check_mods(L, fname);
    const char *name = check_name(L, 2, fname);
    bool keep = false;
    if (!lua_isnoneornil(L, 3)) {
        static const char *const keys[] = {"keep", NULL};
        if (!lua_istable(L, 3)) klua_typeerror(L, 3, fname, "table");
        klua_check_keys(L, 3, 3, fname, keys, false);
        lua_getfield(L, 3, "keep");
        keep = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    klua_mod *mod = klua_mods_find(mods, name);
    if (!mod) return no_mod(L, fname, name);
    for (int i = 0; i < mods->count; i++)
        for (int d = 0; d < mods->list[i]->depend_count; d++)
            if (strcmp(mods->list[i]->depends[d], name) == 0)
                return nil_and(L, fname, lua_pushfstring(L, "mod '%s' depends on '%s'; unload it first",
                                                         mods->list[i]->name, name));
    const char *why = begin(L, mods);
    if (why) klua_fail(L, fname, "%s", why);
    char err[KLUA_MOD_ERROR];
    bool done = klua_mods_unload(mods, mod, keep, err, sizeof err);
    mods->caller = NULL;
    if (!done)
        return nil_and(L, fname, lua_pushfstring(L, "mod '%s' stays loaded: %s; unload it again to finish", name, err));
    lua_pushboolean(L, 1);
    return 1;
}

static int md_reload(lua_State *L) {
    const char *fname = "mods:reload";
    klua_mods *mods = check_mods(L, fname);
    const char *name = check_name(L, 2, fname);
    klua_mod *mod = klua_mods_find(mods, name);
    if (!mod) return no_mod(L, fname, name);
    const char *why = begin(L, mods);
    if (why) klua_fail(L, fname, "%s", why);
    char err[KLUA_MOD_ERROR + 128];
    klua_mod *failed[KLUA_MODS_MAX];
    int nfailed;
    bool ok = klua_mods_reload(mods, mod, err, sizeof err, failed, &nfailed);
    mods->caller = NULL;
    if (!ok) return nil_and(L, fname, err);
    /* the new version runs now: without memory for its info, the call says so with true */
    if (push_info_protected(L, klua_mods_find(mods, name)) != LUA_OK) lua_pushboolean(L, 1);
    if (nfailed == 0) return 1;
    int top = lua_gettop(L);
    /* the dependents whose reload failed (their old versions run on), by name */
    lua_pushnil(L);
    lua_pushlightuserdata(L, failed);
    lua_pushinteger(L, nfailed);
    if (klua_pcall_c(L, record_failed, 3, 1, 0) != LUA_OK) lua_pop(L, 1); /* no room: the info alone */
    return 1 + lua_gettop(L) - top;
}

static int md_list(lua_State *L) {
    klua_mods *mods = check_mods(L, "mods:list");
    klua_mods_sweep(mods);
    lua_createtable(L, mods->count, 0);
    for (int i = 0; i < mods->count; i++) {
        push_info(L, mods->list[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Records failed[name] = the error at the top (popped), in a protected call from md_poll. */
static int record_poll_failure(lua_State *L) {
    lua_pushstring(L, lua_touserdata(L, 2));
    lua_rawset(L, 1);
    return 0;
}

/* mods:poll() -> the names reloaded, and failures by name (reloads that failed). Everything a
 * reload's record needs (both lists sized for every changed mod, their names) is made before
 * the first reload, so a host out of memory raises before any mod reloads, never after. */
static int md_poll(lua_State *L) {
    const char *fname = "mods:poll";
    klua_mods *mods = check_mods(L, fname);
    if (klua_mods_busy(mods)) { /* nothing now; the next poll between frames does it */
        lua_newtable(L);
        lua_newtable(L);
        return 2;
    }
    klua_mods_sweep(mods);
    int changed = 0;
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i]->status == KLUA_MOD_RUNNING && klua_mod_changed(mods->list[i])) changed++;
    luaL_checkstack(L, changed + 8, fname);
    int base = lua_gettop(L);
    lua_createtable(L, changed, 0);
    lua_createtable(L, 0, changed);
    lua_pushliteral(L, "reload failed; no memory for its message (mods:list() has it)");
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i]->status == KLUA_MOD_RUNNING && klua_mod_changed(mods->list[i]))
            lua_pushstring(L, mods->list[i]->name);
    int names = lua_gettop(L) - base - 3, reloaded = 0;
    for (int k = 1; k <= names; k++) {
        int name_idx = base + 3 + k;
        klua_mod *mod = klua_mods_find(mods, lua_tostring(L, name_idx));
        /* a dependent reloaded with what it depends on is current now */
        if (!mod || mod->status != KLUA_MOD_RUNNING || !klua_mod_changed(mod)) continue;
        begin(L, mods);
        char err[KLUA_MOD_ERROR + 128];
        klua_mod *failed[KLUA_MODS_MAX];
        int nfailed;
        bool ok = klua_mods_reload(mods, mod, err, sizeof err, failed, &nfailed);
        mods->caller = NULL;
        if (ok) {
            lua_pushvalue(L, name_idx);
            lua_rawseti(L, base + 1, ++reloaded); /* within the size made: no allocation */
            /* its dependents whose reload failed are failures too (the table may grow) */
            if (nfailed == 0) continue;
            lua_pushvalue(L, base + 2);
            lua_pushlightuserdata(L, failed);
            lua_pushinteger(L, nfailed);
            (void)klua_pcall_c(L, record_failed, 3, 1, 0); /* no room: the message alone is lost */
            lua_pop(L, 1);
            continue;
        }
        /* the old version runs on, the world as it was: its message, or the one made first */
        lua_pushvalue(L, base + 2);
        lua_pushlightuserdata(L, err);
        lua_pushvalue(L, name_idx);
        if (klua_pcall_c(L, record_poll_failure, 3, 0, 0) != LUA_OK) {
            lua_pop(L, 1);
            lua_pushvalue(L, name_idx);
            lua_pushvalue(L, base + 3);
            lua_rawset(L, base + 2); /* a free slot of the size made: no allocation */
        }
        klua_mod *still = klua_mods_find(mods, lua_tostring(L, name_idx));
        if (still) klua_mod_restamp(still);
    }
    lua_settop(L, base + 2);
    return 2;
}

/* mods:log(name [, n]) -> the last n (all kept when absent) lines the mod printed. */
static int md_log(lua_State *L) {
    const char *fname = "mods:log";
    klua_mods *mods = check_mods(L, fname);
    const char *name = check_name(L, 2, fname);
    lua_Integer n = -1; /* all kept */
    if (!lua_isnoneornil(L, 3)) {
        int ok = 0;
        n = lua_tointegerx(L, 3, &ok);
        if (!ok) klua_typeerror(L, 3, fname, "integer");
        if (n < 0) klua_argerror(L, 3, fname, "n must not be negative");
    }
    klua_mod *mod = klua_mods_find(mods, name);
    if (!mod) return no_mod(L, fname, name);
    int64_t kept = mod->log_total < KLUA_MOD_LOG_LINES ? mod->log_total : KLUA_MOD_LOG_LINES;
    int64_t want = n >= 0 && n < kept ? n : kept;
    lua_createtable(L, (int)want, 0);
    for (int64_t i = 0; i < want; i++) {
        int slot = (int)((mod->log_next - want + i + 2 * KLUA_MOD_LOG_LINES) % KLUA_MOD_LOG_LINES);
        lua_pushstring(L, mod->log[slot]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int md_close(lua_State *L) {
    klua_mods *mods = klua_check_self(L, KLUA_MODS, "mods");
    if (mods->closed) return 0;
    if (!mods->kw->closed) settle_loops(L);
    const char *why = klua_mods_busy(mods);
    if (why && !mods->kw->closed) klua_fail(L, "mods:close", "%s", why);
    klua_mods_close(mods, L);
    klua_unref(L, LUA_REGISTRYINDEX, mods->allow_ref);
    klua_unref(L, LUA_REGISTRYINDEX, mods->log_ref);
    mods->allow_ref = mods->log_ref = LUA_NOREF;
    return 0;
}

static int md_gc(lua_State *L) {
    klua_mods *mods = klua_toobject(L, 1, KLUA_MODS); /* debug.getmetatable reaches __gc */
    if (mods) klua_mods_collect(mods);
    return 0;
}

static int md_tostring(lua_State *L) {
    klua_mods *mods = klua_check_self(L, KLUA_MODS, "mods");
    lua_pushfstring(L, "kiln.Mods (%d mods%s)", mods->count, mods->closed ? ", closed" : "");
    return 1;
}

/* A Lua host's log(mod, line), called protected on the host thread. */
typedef struct log_args { klua_mods *mods; const char *mod, *line; } log_args;

static int call_log(lua_State *H) {
    log_args *a = lua_touserdata(H, 1);
    klua_getref(H, LUA_REGISTRYINDEX, a->mods->log_ref);
    lua_pushstring(H, a->mod);
    lua_pushstring(H, a->line);
    lua_call(H, 2, 0);
    return 0;
}

static int close_log_loops(lua_State *H) {
    klua_query_close_loops(H, lua_touserdata(H, 1), ((klua_world *)lua_touserdata(H, 1))->current, false);
    return 0;
}

static void lua_log(void *user, const char *mod, const char *line) {
    klua_mods *mods = user;
    lua_State *H = klua_mods_host_thread(mods);
    if (!lua_checkstack(H, 4)) return;
    /* inside the printing mod's system, held to its access as a granted function is (kiln's
     * guard aborted the host at the log's query of a component it had not declared) */
    klua_mod *m = mods->loading && strcmp(mods->loading->name, mod) == 0 ? mods->loading : klua_mods_find(mods, mod);
    klua_system *host_current = mods->kw->current, *borrowed = m && m->kw ? m->kw->current : NULL;
    if (borrowed) mods->kw->current = borrowed;
    log_args a = {mods, mod, line};
    lua_pushlightuserdata(H, &a);
    if (klua_pcall_c(H, call_log, 1, 0, 0) != LUA_OK) lua_pop(H, 1); /* a failing log loses the line */
    if (borrowed && !mods->kw->closed) {
        lua_pushlightuserdata(H, mods->kw);
        if (klua_pcall_c(H, close_log_loops, 1, 0, 0) != LUA_OK) lua_pop(H, 1);
    }
    mods->kw->current = host_current;
}

static klua_mods *new_mods(lua_State *L, int world_idx, const kiln_lua_mods_desc *desc) {
    klua_world *kw = klua_check_world(L, world_idx);
    if (kw->host) klua_fail(L, "kiln.mods", "a mod cannot manage mods");
    if (kw->on_release) klua_fail(L, "kiln.mods", "the world has a mod manager already");
    klua_commands_prepare_mods(L);
    world_idx = lua_absindex(L, world_idx);
    klua_mods *mods = klua_newobject(L, sizeof *mods, MODS_UV_COUNT, KLUA_MODS);
    memset(mods, 0, sizeof *mods);
    mods->allow_ref = mods->log_ref = LUA_NOREF;
    mods->closed = true; /* until set up */
    lua_pushvalue(L, world_idx);
    lua_setiuservalue(L, -2, MODS_UV_WORLD);
    mods->kw = kw;
    mods->host = klua_main_thread(L);
    mods->memory = desc->memory ? desc->memory : DEFAULT_MEMORY;
    mods->instructions = desc->instructions ? desc->instructions : DEFAULT_INSTRUCTIONS;
    mods->frame_instructions = desc->frame_instructions ? desc->frame_instructions
                               : mods->instructions > INT64_MAX / 4 ? INT64_MAX : 4 * mods->instructions;
    mods->milliseconds = desc->milliseconds > 0 ? desc->milliseconds : desc->milliseconds < 0 ? 0 : 1000;
    int32_t frame_ms = desc->frame_milliseconds; /* by default what one entry gets: 1 s with the defaults */
    mods->frame_milliseconds = frame_ms > 0 ? frame_ms : frame_ms < 0 ? 0 : mods->milliseconds;
    mods->entities = desc->entities ? desc->entities : DEFAULT_ENTITIES;
    mods->world_memory = desc->world_memory ? desc->world_memory : DEFAULT_WORLD_MEMORY;
    mods->queries = desc->queries ? desc->queries : DEFAULT_QUERIES;
    mods->archetypes = desc->archetypes ? desc->archetypes : DEFAULT_ARCHETYPES;
    mods->components = desc->components ? desc->components : DEFAULT_COMPONENTS;
    mods->systems = desc->systems ? desc->systems : DEFAULT_SYSTEMS;
    mods->seed = desc->seed;
    mods->readonly_count = klua_mods_readonly_resolve(L, kw, desc->readonly, mods->readonly); /* may raise: closed */
    mods->log_fn = desc->log;
    mods->log_user = desc->log_user;
    klua_schedule(L, kw);
    mods->closed = false;
    kw->on_release = klua_mods_close_all;
    kw->on_release_ud = mods;
    kw->load_owned = klua_mods_load_owned;
    klua_mods_watch_drops(mods);
    /* the world keeps its manager: collected mid-frame, it would close mod states the schedule holds */
    lua_getiuservalue(L, world_idx, KLUA_WORLD_UV_STATE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "mods");
    lua_pop(L, 1);
    return mods;
}

/* kiln.mods(world [, opts]): opts are the keys below, each described in docs/modding.md */
static int md_new(lua_State *L) {
    if (klua_console_active(L)) /* its mods would run under budgets of their own */
        klua_fail(L, "kiln.mods", "not available in a console statement");
    const char *fname = "kiln.mods";
    if (!luaL_testudata(L, 1, KLUA_WORLD)) klua_typeerror(L, 1, fname, KLUA_WORLD);
    kiln_lua_mods_desc desc = {0};
    const char *readonly[KLUA_MODS_MAX_READONLY + 1];
    if (!lua_isnoneornil(L, 2)) {
        klua_mods_read_options(L, &desc, readonly, fname);
    } else {
        lua_settop(L, 1);
        lua_settop(L, 4); /* nil for opts, allow and log */
    }
    /* stack: world, opts, allow, log */
    klua_mods *mods = new_mods(L, 1, &desc);
    if (!lua_isnil(L, 4)) {
        lua_pushvalue(L, 4);
        mods->log_ref = klua_ref(L, LUA_REGISTRYINDEX);
        mods->log_fn = lua_log;
        mods->log_user = mods;
    }
    if (!lua_isnil(L, 3)) {
        lua_pushvalue(L, 3);
        mods->allow_ref = klua_ref(L, LUA_REGISTRYINDEX);
    }
    return 1;
}

int kiln_lua_mods_push(lua_State *L, int world_idx, const kiln_lua_mods_desc *desc) {
    kiln_lua_mods_desc none = {0};
    klua_mods_check_desc(L, desc ? desc : &none);
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_pop(L, 1);
    new_mods(L, world_idx, desc ? desc : &none);
    return 1;
}

/* Runs a method with the manager held: host code it reaches (the log, a function granted to
 * a mod, a finalizer run by an allocation) finds the manager busy, and the world refuses to
 * close (a guest of it runs), so no mod or list the method holds is freed under it. */
static int held_call(lua_State *L, lua_CFunction body) {
    klua_mods *mods = luaL_testudata(L, 1, KLUA_MODS);
    if (!mods) return body(L); /* raises its own argument error */
    int n = lua_gettop(L);
    lua_pushcfunction(L, body);
    lua_insert(L, 1);
    lua_State *caller = mods->caller; /* set back however the body ends */
    mods->held++;
    mods->kw->guest_depth++;
    int status = lua_pcall(L, n, LUA_MULTRET, 0);
    mods->kw->guest_depth--;
    mods->held--;
    mods->caller = caller;
    if (status != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

#define HELD(fn) \
    static int fn##_held(lua_State *L) { return held_call(L, fn); }
HELD(md_load)
HELD(md_load_dir)
HELD(md_unload)
HELD(md_reload)
HELD(md_list)
HELD(md_poll)
HELD(md_log)
HELD(md_close)
HELD(md_readonly)

static const luaL_Reg mods_methods[] = {
    {"load", md_load_held}, {"load_dir", md_load_dir_held}, {"unload", md_unload_held}, {"reload", md_reload_held},
    {"list", md_list_held}, {"poll", md_poll_held},         {"log", md_log_held},       {"close", md_close_held},
    {"readonly", md_readonly_held}, {NULL, NULL},
};

static const luaL_Reg mods_meta[] = {
    {"__gc", md_gc},
    {"__close", md_close_held},
    {"__tostring", md_tostring},
    {NULL, NULL},
};

void klua_open_mods(lua_State *L) {
    klua_createmeta(L, KLUA_MODS, mods_methods, mods_meta);
    /* LuaJIT makes a C function object on its first push in a state: the bodies are made
     * now, so a held call allocates nothing of its own (a host out of memory can unload) */
    static const lua_CFunction bodies[] = {md_load, md_load_dir, md_unload, md_reload,
                                           md_list, md_poll,     md_log,    md_close, md_readonly};
    for (size_t i = 0; KLUA_LUAJIT && i < sizeof bodies / sizeof *bodies; i++) {
        lua_pushcfunction(L, bodies[i]);
        lua_pop(L, 1);
    }
    lua_pushcfunction(L, md_new);
    lua_setfield(L, -2, "mods");
}
