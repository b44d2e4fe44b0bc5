/* systems.c: Lua systems in the world's kiln schedule, run on the calling thread beside C
 * systems on workers, with declared access enforced and failures contained. Invariant: a
 * Lua system runs under lua_pcall; when it raises, its queued structural changes are
 * dropped, the frame goes on, and progress() reports the failure. */
#include <stdio.h>
#include <string.h>

#include "kiln_transform.h"
#include "klua.h"

#define MAX_ACCESS KILN_SYSTEM_MAX_ACCESS

static bool listed(const kiln_component *list, int n, kiln_component c) {
    for (int i = 0; i < n; i++)
        if (list[i] == c) return true;
    return false;
}

#define FNAME "world:system"
static const char *const no_keys[] = {NULL};

/* Reads a list of component names at key into dest, each at most once. */
static int access_list(lua_State *L, klua_world *kw, int idx, const char *key, kiln_component *dest) {
    lua_pushstring(L, key);
    lua_rawget(L, idx); /* raw: no metamethod runs mid-call */
    int n = 0;
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) klua_argerror(L, idx, FNAME, "%s must be a list of component names", key);
        klua_check_keys(L, -1, idx, FNAME, no_keys, true);
        int len = (int)lua_rawlen(L, -1);
        if (len > MAX_ACCESS) klua_argerror(L, idx, FNAME, "at most %d components in %s", MAX_ACCESS, key);
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, -1, i);
            dest[n] = klua_check_component(L, kw, -1, idx, FNAME);
            for (int j = 0; j < n; j++) /* as a query refuses a repeated term */
                if (dest[j] == dest[n]) {
                    kiln_component_info info;
                    kiln_component_info_get(kw->world, dest[n], &info);
                    klua_argerror(L, idx, FNAME, "%s lists %s twice", key, info.name);
                }
            n++;
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

/* Reads a list of system names at key (strings kept alive in the state table). */
static int order_list(lua_State *L, int idx, const char *key, const char **dest) {
    lua_pushstring(L, key);
    lua_rawget(L, idx); /* raw: no metamethod runs mid-call */
    int n = 0;
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) klua_argerror(L, idx, FNAME, "%s must be a list of system names", key);
        klua_check_keys(L, -1, idx, FNAME, no_keys, true);
        int len = (int)lua_rawlen(L, -1);
        if (len > KILN_SYSTEM_MAX_ORDER)
            klua_argerror(L, idx, FNAME, "at most %d names in %s", KILN_SYSTEM_MAX_ORDER, key);
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, -1, i);
            if (lua_type(L, -1) != LUA_TSTRING) klua_argerror(L, idx, FNAME, "%s[%d] must be a system name", key, i);
            dest[n++] = lua_tostring(L, -1); /* anchored by the desc table at idx */
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static int run_each(lua_State *L) {
    /* args: query, fn, dt */
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    klua_system *s = kq->kw->current;
    klua_query_each_call(L, 1, 2, 3, s ? s->each_cost : -1);
    return 0;
}

void klua_push_failure(lua_State *L, int world_idx, const char *system, const char *message, size_t len,
                       const char *traceback, bool disabled, const char *mod) {
    world_idx = lua_absindex(L, world_idx);
    if (lua_type(L, world_idx) != LUA_TUSERDATA) return;
    /* raw, and nothing assumed of what lies there: the state is the host's to change */
    if (lua_getiuservalue(L, world_idx, KLUA_WORLD_UV_STATE) != LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    lua_pushstring(L, KLUA_STATE_FAILURES);
    if (lua_rawget(L, -2) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushstring(L, KLUA_STATE_FAILURES);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    lua_createtable(L, 0, 5);
    lua_pushstring(L, system);
    lua_setfield(L, -2, "system");
    lua_pushlstring(L, message, len);
    lua_setfield(L, -2, "message");
    lua_pushstring(L, traceback);
    lua_setfield(L, -2, "traceback");
    lua_pushboolean(L, disabled);
    lua_setfield(L, -2, "disabled");
    if (mod) {
        lua_pushstring(L, mod);
        lua_setfield(L, -2, "mod");
    }
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 2);
}

/* Records the failure of s, whose error (with its traceback) is at err_idx. */
static void record_failure(lua_State *L, klua_system *s, int world_idx, int err_idx, bool disabled) {
    const char *full = lua_tostring(L, err_idx);
    if (!full) full = "(error)";
    const char *tb = strstr(full, "\nstack traceback:");
    klua_push_failure(L, world_idx, s->name, full, tb ? (size_t)(tb - full) : strlen(full), tb ? tb + 1 : "", disabled,
                      NULL);
}

/* record_failure run protected: 1 the system (light userdata), 2 its world, 3 the error,
 * 4 disabled. (The world is passed: klua_push_self reads w_progress's frame.) */
static int record_failure_call(lua_State *L) {
    record_failure(L, lua_touserdata(L, 1), 2, 3, lua_toboolean(L, 4));
    return 0;
}

/* A failure the trampoline could not record (no memory for the record, or for the run's own
 * stack): counted in C, reported by the next world:progress or world:failures. */
static void lose_failure(klua_world *kw, const klua_system *s) {
    if (kw->lost_failures++ == 0) memcpy(kw->lost_system, s->name, sizeof kw->lost_system);
}

/* Records the lost failures as one entry of the world at world_idx (may raise: call it
 * outside the core). */
static void report_lost_failures(lua_State *L, klua_world *kw, int world_idx) {
    if (!kw->lost_failures) return;
    char msg[96];
    int len = snprintf(msg, sizeof msg, "not enough memory (%lld failed run%s, not recorded)",
                       (long long)kw->lost_failures, kw->lost_failures == 1 ? "" : "s");
    klua_push_failure(L, world_idx, kw->lost_system, msg, (size_t)len, "", false, NULL);
    kw->lost_failures = 0; /* once recorded: a raise above keeps them for the next report */
}

/* Records a failed run of the C transform system (kiln_transform_system_desc) as a failure of
 * the world at world_idx: it returns nothing, so its failure (a chain deeper than 256 that
 * writes through views or bulk made, say) would pass unseen (may raise: outside the core). */
static void report_transform_failure(lua_State *L, klua_world *kw, int world_idx) {
    char msg[256];
    if (kiln_transform_system_result(kw->world, msg, sizeof msg) == KILN_OK) return;
    klua_push_failure(L, world_idx, "propagate_transforms", msg, strlen(msg), "", false, NULL);
}

/* Records a frame whose end could not land its changes (w_progress kept the core's message)
 * as a failure of the world at world_idx (may raise: outside the core). */
static void report_landing_failure(lua_State *L, klua_world *kw, int world_idx) {
    if (!kw->landing_failure[0]) return;
    char msg[sizeof kw->landing_failure + 160];
    int len = snprintf(msg, sizeof msg, "%s (the frame ran; that change and those queued after it wait, in "
                       "order, and land when the next frame's stages end)", kw->landing_failure);
    klua_push_failure(L, world_idx, KLUA_FRAME_END, msg, (size_t)len, "", false, NULL);
    kw->landing_failure[0] = '\0'; /* once recorded: a raise above keeps it for the next report */
}

/* A system's function and query are held by its world's state table (KLUA_STATE_RUNS, keyed
 * by the system's address), not by the registry: a query leads back to its world, and a
 * registry reference to it kept a world its script dropped alive for good. Slots of an entry: */
enum run_slot { RUN_FN = 1, RUN_QUERY };

/* Pushes the entry of s from the world at world_idx (nil once s was released, or without
 * the world). */
static void push_run(lua_State *L, int world_idx, const klua_system *s) {
    if (klua_push_state(L, world_idx, KLUA_STATE_RUNS)) {
        lua_rawgetp(L, -1, s);
        lua_remove(L, -2);
    }
}

/* Makes a system of kw, with its memory from the allocator of L (a mod's counts it). */
static klua_system *new_system(lua_State *L, klua_world *kw) {
    void *ud;
    lua_Alloc alloc = klua_lasting_allocf(L, &ud); /* a console statement's ends with it */
    klua_system *s = alloc(ud, NULL, 0, sizeof *s);
    if (!s) klua_no_memory(L);
    memset(s, 0, sizeof *s);
    s->alloc = alloc;
    s->alloc_ud = ud;
    s->kw = kw;
    s->next = kw->systems;
    kw->systems = s;
    return s;
}

static void free_system(klua_system *s) {
    for (klua_system **at = &s->kw->systems; *at; at = &(*at)->next)
        if (*at == s) {
            *at = s->next;
            break;
        }
    s->alloc(s->alloc_ud, s, sizeof *s, 0);
}

void klua_free_systems(klua_world *kw) {
    while (kw->systems) free_system(kw->systems);
}

/* Pushes slot i of the entry at idx; nil when the entry is missing (a host script changed the
 * world's state through the debug library: the run then fails). */
static void push_part(lua_State *L, int idx, enum run_slot i) {
    if (lua_type(L, idx) == LUA_TTABLE) lua_rawgeti(L, idx, i);
    else lua_pushnil(L);
}

/* A failed run: its structural changes dropped (documented rule: writes it made in place
 * through views or world:set stay), counted, and the system disabled at max_failures in a
 * row. Returns whether it was. */
static bool count_failure(const kiln_system_ctx *ctx, klua_system *s) {
    klua_world *kw = s->kw;
    kiln_commands_clear(ctx->commands);
    s->failures++;
    kw->frame_failures++;
    int32_t max_failures = kw->host ? kw->host->max_failures : kw->max_failures;
    bool disable = max_failures > 0 && s->failures >= max_failures;
    if (disable) kiln_schedule_enable(kw->schedule, s->name, false);
    return disable;
}

/* The kiln_system_fn of every Lua system: runs on the thread calling world:progress. */
static void trampoline(const kiln_system_ctx *ctx) {
    klua_system *s = ctx->user;
    klua_world *kw = s->kw;
    /* On the thread running world:progress (a coroutine, maybe), else the main thread. */
    lua_State *L = kw->run_L ? kw->run_L : s->L;
    /* Nothing here may raise: the core is on the C stack below. The run's function and its
     * failure's record are protected calls, and what is pushed outside them has room. */
    if (!lua_checkstack(L, 16)) { /* no room for the run: it fails as out of memory */
        bool disable = count_failure(ctx, s);
        if (kw->mod_hooks) kw->mod_hooks->failed(kw, s->name, "not enough memory", disable, true);
        else lose_failure(kw, s);
        return;
    }
    klua_jit_push_running(L, kw); /* LuaJIT: the system read-only FFI views name, set back below */
    int top = lua_gettop(L);
    int handler = top + 1; /* the message handler; LuaJIT without memory to make it: none */
    if (!klua_push_c(L, traceback)) {
        lua_pushnil(L);
        handler = 0;
    }
    int status;
    kw->current = s;
    klua_armed saved;
    char what[KILN_MAX_NAME + 16];
    snprintf(what, sizeof what, "system '%s'", s->name);
    klua_push_self(L, kw);
    int self = lua_gettop(L);
    push_run(L, self, s);
    int run = self + 1;
    klua_budget_arm(L, kw, kw->instructions, what, &saved);
    if (!s->each) {
        push_part(L, run, RUN_FN);
        lua_pushvalue(L, self);
        lua_pushnumber(L, ctx->dt);
        status = lua_pcall(L, 2, 0, handler);
        klua_budget_disarm(L, kw, &saved);
    } else {
        /* LuaJIT: a Lua loop over FFI views where the world allows them (jit_views.c) */
        bool views = klua_jit_push_each_runner(L, kw);
        push_part(L, run, RUN_QUERY);
        push_part(L, run, RUN_FN);
        lua_pushnumber(L, ctx->dt);
        status = views ? lua_pcall(L, 3, 0, handler) : klua_pcall_c(L, run_each, 3, 0, handler);
        klua_budget_disarm(L, kw, &saved);
        push_part(L, run, RUN_QUERY);
        /* ends an iteration the error interrupted (a query: the entry is the host's to change) */
        if (luaL_testudata(L, -1, KLUA_QUERY)) klua_query_abort(L, -1);
        lua_pop(L, 1);
    }
    /* Documented rule: loops the system left open (suspended in a coroutine) end with its
     * run, so none can keep the world deferred or be resumed by another system. */
    klua_query_close_loops(L, kw, s, false);
    kw->current = NULL;
    if (status == LUA_OK) {
        s->failures = 0;
    } else if (klua_console_overdue(L)) {
        /* stopped by its caller's limits (a console statement's time or budget ran out inside
         * world:progress): not the system's failure, so neither counted toward max_failures
         * nor recorded (the statement reports the stop); half a run's structural changes are
         * dropped, as a failed run's */
        kiln_commands_clear(ctx->commands);
    } else {
        bool disable = count_failure(ctx, s);
        if (kw->mod_hooks) {
            /* a mod's failures go to the manager and the host's list, not to the mod's state;
             * the message is cut before its traceback in C (the mod's memory may be full) */
            const char *full = lua_tostring(L, -1);
            const char *tb = full ? strstr(full, "\nstack traceback:") : NULL;
            char msg[640];
            if (full) snprintf(msg, sizeof msg, "%.*s", (int)(tb ? tb - full : (ptrdiff_t)strlen(full)), full);
            /* a memory error skips the message handler; one the mod caught and raised again
             * is the same text */
            bool oom = status == LUA_ERRMEM || (full && strcmp(full, "not enough memory") == 0);
            kw->mod_hooks->failed(kw, s->name, full ? msg : "(error)", disable, oom);
        } else {
            int err = lua_gettop(L);
            lua_pushlightuserdata(L, s);
            klua_push_self(L, kw);
            lua_pushvalue(L, err);
            lua_pushboolean(L, disable);
            if (klua_pcall_c(L, record_failure_call, 4, 0, 0) != LUA_OK) lose_failure(kw, s);
        }
    }
    lua_settop(L, top);
    klua_jit_restore_running(L, kw, top);
}

/* The system's kiln_fini_fn: it has left the schedule (removed, or the schedule destroyed).
 * Releases its function and query, and its name in the world's systems table unless a
 * system of the same name has taken that place meanwhile, and frees it. Runs on the thread
 * that owns Lua (Lua systems are main-thread systems), inside the schedule: nothing raises. */
static void system_fini(kiln_world *world, void *user) {
    (void)world;
    klua_system *s = user;
    klua_world *kw = s->kw;
    lua_State *L = kw->run_L ? kw->run_L : s->L;
    /* the world being collected (its weak entry is gone then) takes its state table along */
    if (!kw->closed && lua_checkstack(L, 6)) {
        klua_push_self(L, kw);
        if (klua_push_state(L, -1, KLUA_STATE_RUNS)) {
            if (lua_rawgetp(L, -1, s) != LUA_TNIL) {
                lua_pushnil(L);
                lua_rawsetp(L, -3, s); /* the key exists: no allocation */
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        if (klua_push_state(L, -1, KLUA_STATE_SYSTEMS)) {
            lua_pushstring(L, s->name);
            lua_pushvalue(L, -1);
            if (lua_rawget(L, -3) == LUA_TLIGHTUSERDATA && lua_touserdata(L, -1) == s) {
                lua_pop(L, 1);
                lua_pushnil(L);
                lua_rawset(L, -3);
            } else {
                lua_pop(L, 2);
            }
        }
        lua_pop(L, 2);
    }
    free_system(s);
}

/* Checks the descriptor of world:system and fills d (names anchored by the table at 2). */
static void read_system_desc(lua_State *L, klua_world *kw, kiln_system_desc *d, int *nr, int *nw) {
    static const char *const keys[] = {"name", "reads", "writes", "before", "after", "exclusive",
                                       "run", "each", "query", NULL};
    if (!lua_istable(L, 2)) klua_typeerror(L, 2, FNAME, "table");
    klua_check_keys(L, 2, 2, FNAME, keys, false);
    lua_pushstring(L, "name");
    lua_rawget(L, 2);
    if (lua_type(L, -1) != LUA_TSTRING) klua_argerror(L, 2, FNAME, "name must be a string");
    size_t len;
    const char *name = lua_tolstring(L, -1, &len);
    lua_pop(L, 1); /* anchored by the desc table */
    if (len == 0 || len > KILN_MAX_NAME || strlen(name) != len)
        klua_argerror(L, 2, FNAME, "name must be 1 to %d bytes without zero bytes", KILN_MAX_NAME);
    memset(d, 0, sizeof *d);
    d->name = name;
    d->main_thread = true;
    lua_pushstring(L, "exclusive");
    lua_rawget(L, 2);
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) klua_argerror(L, 2, FNAME, "exclusive must be a boolean");
    d->exclusive = lua_toboolean(L, -1);
    lua_pop(L, 1);
    *nr = access_list(L, kw, 2, "reads", d->reads);
    *nw = access_list(L, kw, 2, "writes", d->writes);
    for (int i = 0; kw->host && i < *nw; i++) /* a mod's: refused now rather than at its first write */
        if (klua_mod_readonly(kw, d->writes[i])) {
            kiln_component_info info;
            kiln_component_info_get(kw->world, d->writes[i], &info);
            klua_argerror(L, 2, FNAME, "writes lists %s, which is read-only to mods (the host lists it in "
                          "kiln.mods' readonly); mods may list it in reads", info.name);
        }
    order_list(L, 2, "before", d->before);
    order_list(L, 2, "after", d->after);
}

/* What register_system adds: the system of desc d to sched on the world kw. */
typedef struct registration {
    klua_world *kw;
    kiln_schedule *sched;
    const kiln_system_desc *d;
} registration;

/* Runs protected, with (registration, the World, the system's entry): records the entry
 * under the system's address, anchors the system by its name, and adds it to the schedule;
 * raises when refused. What allocates runs before the system is in: once it is, nothing
 * here can fail, so a system in the schedule always has its entry. */
static int register_system(lua_State *L) {
    registration *reg = lua_touserdata(L, 1);
    klua_world *kw = reg->kw;
    if (!klua_push_state(L, 2, KLUA_STATE_RUNS) || !klua_push_state(L, 2, KLUA_STATE_SYSTEMS))
        klua_fail(L, FNAME, "the world's state was changed through the debug library");
    lua_pushvalue(L, 3);
    lua_rawsetp(L, -3, reg->d->user);
    lua_pushstring(L, reg->d->name);
    lua_pushlightuserdata(L, reg->d->user);
    lua_rawset(L, -3);
    if (kw->mod_hooks) kw->mod_hooks->add_system(L, kw, reg->d); /* raises when refused */
    else if (kiln_schedule_add(reg->sched, reg->d) != KILN_OK) klua_fail_world(L, kw->world, FNAME);
    return 0;
}

/* Undoes what a refused register_system did, leaving the world's state table as it was
 * before (old_idx: what the name anchored then); the error stays on top. Allocates nothing:
 * only keys that exist are set. */
static void unregister(lua_State *L, int old_idx, const klua_system *s, const char *name) {
    if (klua_push_state(L, 1, KLUA_STATE_RUNS)) {
        if (lua_rawgetp(L, -1, s) != LUA_TNIL) {
            lua_pushnil(L);
            lua_rawsetp(L, -3, s); /* the key exists: no allocation */
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (klua_push_state(L, 1, KLUA_STATE_SYSTEMS)) {
        lua_pushstring(L, name);
        lua_pushvalue(L, -1);
        if (lua_rawget(L, -3) == LUA_TLIGHTUSERDATA && lua_touserdata(L, -1) == s) {
            lua_pop(L, 1);
            lua_pushvalue(L, old_idx);
            lua_rawset(L, -3);
        } else {
            lua_pop(L, 2);
        }
    }
    lua_pop(L, 1);
}

/* world:system{name =, reads =, writes =, before =, after =, exclusive =, run = | each =
 * with query =}: adds a Lua system to the world's schedule. */
static int w_system(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = FNAME;
    kiln_system_desc d;
    int nr, nw;
    read_system_desc(L, kw, &d, &nr, &nw);
    const char *name = d.name;
    kiln_schedule *sched = klua_schedule(L, kw);
    if (!kw->mod_hooks && kiln_schedule_find(sched, name) >= 0)
        klua_fail(L, fname, "a system named '%s' already exists", name);
    lua_pushstring(L, "run");
    lua_rawget(L, 2);
    lua_pushstring(L, "each");
    lua_rawget(L, 2);
    lua_pushstring(L, "query");
    lua_rawget(L, 2);
    bool has_run = !lua_isnil(L, -3), has_each = !lua_isnil(L, -2), has_query = !lua_isnil(L, -1);
    if (has_run == has_each)
        klua_argerror(L, 2, fname, "give exactly one of run = function(world, dt) and each = function(e, ...)");
    if (has_run && !lua_isfunction(L, -3)) klua_argerror(L, 2, fname, "run must be a function");
    if (has_each && !lua_isfunction(L, -2)) klua_argerror(L, 2, fname, "each must be a function");
    if (has_each && !has_query) klua_argerror(L, 2, fname, "an each system needs query = {...}");
    if (has_run && has_query) klua_argerror(L, 2, fname, "query goes with each, not with run");
    int fn_idx = has_run ? lua_gettop(L) - 2 : lua_gettop(L) - 1;
    int query_idx = 0;
    if (has_query) {
        /* The query's terms count as reads unless the system declared them. */
        luaL_getmetatable(L, KLUA_WORLD); /* world:query's upvalue: see klua_self */
        lua_pushcclosure(L, klua_world_query, 1);
        lua_pushvalue(L, 1);
        lua_pushvalue(L, -3);
        if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
            const char *msg = lua_tostring(L, -1);
            klua_argerror(L, 2, fname, "query: %s", msg ? msg : "error");
        }
        query_idx = lua_gettop(L);
        lua_getfield(L, query_idx, "terms");
        lua_pushvalue(L, query_idx);
        lua_call(L, 1, 1);
        int len = (int)lua_rawlen(L, -1), declared = nr, past = 0;
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, -1, i);
            kiln_component c = klua_check_component(L, kw, -1, 2, fname);
            lua_pop(L, 1);
            if (!listed(d.reads, nr, c) && !listed(d.writes, nw, c)) {
                if (nr < MAX_ACCESS) d.reads[nr++] = c;
                else past++;
            }
        }
        lua_pop(L, 1);
        if (past)
            klua_argerror(L, 2, fname,
                          "at most %d components in reads, which lists %d and gets %d more from the query's terms "
                          "(a term counts as a read unless reads or writes lists it)",
                          MAX_ACCESS, declared, nr + past - declared);
    }
    int64_t each_cost = has_each ? klua_bounded_cost(L, fn_idx) : -1;
    /* The entry of the system (push_run), made before the schedule can run it. */
    lua_createtable(L, RUN_QUERY, 0);
    lua_pushvalue(L, fn_idx);
    lua_rawseti(L, -2, RUN_FN);
    if (query_idx) {
        lua_pushvalue(L, query_idx);
        lua_rawseti(L, -2, RUN_QUERY);
    }
    int run_idx = lua_gettop(L);
    luaL_checkstack(L, 8, NULL);
    /* what the name held before: put back on a refusal (raw: the state is the host's) */
    if (klua_push_state(L, 1, KLUA_STATE_SYSTEMS)) {
        lua_pushstring(L, name);
        lua_rawget(L, -2);
        lua_remove(L, -2);
    }
    int old_idx = lua_gettop(L);
    klua_system *s = new_system(L, kw); /* nothing raises from here to the protected call */
    s->each = query_idx != 0;
    s->each_cost = each_cost;
    s->L = klua_main_thread(L); /* never the coroutine that happened to define it */
    strcpy(s->name, name);
    s->exclusive = d.exclusive;
    memcpy(s->reads, d.reads, sizeof s->reads);
    memcpy(s->writes, d.writes, sizeof s->writes);
    s->read_count = nr;
    s->write_count = nw;
    d.run = trampoline;
    d.fini = system_fini;
    d.user = s;
    registration reg = {kw, sched, &d};
    lua_pushlightuserdata(L, &reg);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, run_idx);
    if (klua_pcall_c(L, register_system, 3, 0, 0) != LUA_OK) {
        unregister(L, old_idx, s, name);
        free_system(s);
        lua_error(L);
    }
    /* no lua_settop below the collector guard here: Lua 5.4.4's lua_settop can use a stale
     * stack pointer after closing a to-be-closed slot; returning closes it safely */
    return 0;
}

/* The end of world:progress (1 the world, 2 its klua_world), protected: true, or false and
 * the failures recorded since the last report (those that found no memory first). */
static int progress_result(lua_State *L) {
    report_lost_failures(L, lua_touserdata(L, 2), 1);
    report_transform_failure(L, lua_touserdata(L, 2), 1);
    report_landing_failure(L, lua_touserdata(L, 2), 1);
    lua_getiuservalue(L, 1, KLUA_WORLD_UV_STATE);
    if (lua_getfield(L, -1, KLUA_STATE_FAILURES) == LUA_TNIL) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_setfield(L, -3, KLUA_STATE_FAILURES);
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
}

static int w_progress(lua_State *L) {
    klua_world *kw = klua_self_plain(L); /* systems run Lua: the collector keeps running */
    if (!lua_isnoneornil(L, 2) && !lua_isnumber(L, 2)) klua_typeerror(L, 2, "world:progress", "number");
    lua_Number dt = lua_isnoneornil(L, 2) ? 0.0 : lua_tonumber(L, 2);
    if (kw->host) klua_fail(L, "world:progress", "a mod cannot run the schedule; the host runs the frames");
    /* Loops no thread can end any more (left suspended in a coroutine) end here. */
    if (!kw->current) klua_query_close_loops(L, kw, NULL, true);
    /* ending them makes objects: a finalizer may have closed the world */
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    if (kw->current || kiln_is_deferred(kw->world))
        klua_fail(L, "world:progress", "cannot run the schedule from inside a system, a query loop or a deferred section");
    /* host code a mod reaches (a granted function, the log) runs inside that mod's entry: a
     * frame there ran other mods' systems as part of a loading top level, whose failure took
     * their changes back */
    if (kw->guest_depth > 0)
        klua_fail(L, "world:progress", "cannot run the schedule while a mod's code or a mods call runs");
    kiln_schedule *sched = klua_schedule(L, kw);
    if (kw->closed) luaL_error(L, "attempt to use a closed world"); /* as above */
    lua_settop(L, 1);
    kw->progress_idx = 1;
    kw->run_L = L;
    kw->frame_failures = 0;
    kiln_tick tick = kiln_tick_current(kw->world);
    kiln_result r = kiln_schedule_run(sched, dt);
    kw->progress_idx = 0;
    kw->run_L = NULL;
    if (r != KILN_OK && kiln_tick_current(kw->world) == tick) klua_fail_world(L, kw->world, "world:progress");
    /* The frame ran, but a stage's end could not land all its changes (out of the world's
     * memory): those before the refused one landed, the rest stay queued. A failure to
     * report, not to raise: a caller told "no frame" would run it again. */
    if (r != KILN_OK)
        snprintf(kw->landing_failure, sizeof kw->landing_failure, "%s", klua_core_detail(kiln_world_error(kw->world)));
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, kw);
    if (klua_pcall_c(L, progress_result, 2, LUA_MULTRET, 0) == LUA_OK) return lua_gettop(L) - 1;
    /* No memory for the list: the frame has run, so progress reports rather than raises; the
     * failures stay for world:failures(). */
    lua_pushboolean(L, kw->frame_failures == 0 && r == KILN_OK);
    return 1;
}

/* world:failures() -> the failures recorded since the last progress() or failures() call
 * (systems a host ran with kiln_schedule_run report here), or an empty list. */
static int w_failures(lua_State *L) {
    klua_world *kw = klua_self(L);
    report_lost_failures(L, kw, 1);
    report_transform_failure(L, kw, 1);
    report_landing_failure(L, kw, 1);
    lua_getiuservalue(L, 1, KLUA_WORLD_UV_STATE);
    if (lua_getfield(L, -1, KLUA_STATE_FAILURES) == LUA_TNIL) {
        lua_newtable(L);
        return 1;
    }
    lua_pushnil(L);
    lua_setfield(L, -3, KLUA_STATE_FAILURES);
    return 1;
}

/* world:max_failures(n): disable a Lua system after n consecutive failures (0: never). */
static int w_max_failures(lua_State *L) {
    klua_world *kw = klua_self(L);
    int ok = 0;
    lua_Integer n = lua_tointegerx(L, 2, &ok);
    if (!ok) klua_typeerror(L, 2, "world:max_failures", "integer");
    if (n < 0 || n > INT32_MAX) klua_argerror(L, 2, "world:max_failures", "n must be from 0 to %d", INT32_MAX);
    if (kw->host) klua_fail(L, "world:max_failures", "the host sets how many failures stop a system");
    kw->max_failures = (int32_t)n;
    return 0;
}

static int w_systems(lua_State *L) {
    klua_world *kw = klua_self(L);
    kiln_schedule *sched = klua_schedule(L, kw);
    int32_t n = kiln_schedule_system_count(sched);
    kiln_schedule_stage_count(sched); /* builds, so stages are known */
    lua_getiuservalue(L, 1, KLUA_WORLD_UV_STATE);
    lua_getfield(L, -1, KLUA_STATE_SYSTEMS);
    int lua_systems = lua_gettop(L);
    lua_createtable(L, n, 0);
    for (int32_t i = 0; i < n; i++) {
        kiln_system_info info;
        kiln_schedule_system_info_get(sched, i, &info);
        lua_createtable(L, 0, 12);
        lua_pushstring(L, info.name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, info.stage);
        lua_setfield(L, -2, "stage");
        lua_getfield(L, lua_systems, info.name);
        lua_pushstring(L, lua_isnil(L, -1) ? "c" : "lua");
        lua_setfield(L, -3, "kind");
        lua_pop(L, 1);
        lua_pushboolean(L, info.enabled);
        lua_setfield(L, -2, "enabled");
        lua_pushinteger(L, info.runs);
        lua_setfield(L, -2, "runs");
        lua_pushnumber(L, (lua_Number)info.last_ns / 1e6);
        lua_setfield(L, -2, "last_ms");
        lua_pushnumber(L, info.runs ? (lua_Number)info.total_ns / (lua_Number)info.runs / 1e6 : 0.0);
        lua_setfield(L, -2, "avg_ms");
        lua_pushboolean(L, info.exclusive);
        lua_setfield(L, -2, "exclusive");
        lua_pushboolean(L, info.removing);
        lua_setfield(L, -2, "removing");
        lua_pushinteger(L, info.unresolved);
        lua_setfield(L, -2, "unresolved");
        for (int k = 0; k < 2; k++) {
            int32_t count = k ? info.after_count : info.before_count;
            lua_createtable(L, count, 0);
            for (int32_t j = 0; j < count; j++) {
                lua_pushstring(L, k ? info.after[j] : info.before[j]);
                lua_rawseti(L, -2, j + 1);
            }
            lua_setfield(L, -2, k ? "after" : "before");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* A mod's view may enable, disable or remove only the mod's own systems. */
static void check_own(lua_State *L, klua_world *kw, const char *name, const char *fname) {
    if (!kw->host) return;
    bool own = false;
    for (klua_system *s = kw->systems; s && !own; s = s->next) own = strcmp(s->name, name) == 0;
    if (!own) klua_argerror(L, 2, fname, "'%s' is not a system of this mod", klua_quote(L, name, strlen(name)));
}

static int w_enable(lua_State *L) {
    bool on = lua_isnone(L, 3) ? true : lua_toboolean(L, 3); /* before klua_self pads */
    klua_world *kw = klua_self(L);
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, "world:enable", "system name");
    size_t len;
    const char *name = lua_tolstring(L, 2, &len);
    kiln_schedule *sched = klua_schedule(L, kw);
    if (klua_name_ok(name, len)) check_own(L, kw, name, "world:enable");
    if (!klua_name_ok(name, len) || kiln_schedule_enable(sched, name, on) != KILN_OK)
        klua_argerror(L, 2, "world:enable", "no system named '%s'", klua_quote(L, name, len));
    /* Enabling a Lua system again gives it a fresh count of consecutive failures. */
    for (klua_system *s = kw->systems; s && on; s = s->next)
        if (strcmp(s->name, name) == 0) s->failures = 0;
    return 0;
}

/* world:instructions([n]): the budget of one Lua system run in instructions (0: none);
 * sets it when n is given, and returns the budget in force. */
static int w_instructions(lua_State *L) {
    bool setting = !lua_isnoneornil(L, 2); /* before klua_self pads */
    klua_world *kw = klua_self(L);
    if (setting) {
        int ok = 0;
        lua_Integer n = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &ok) : 0;
        if (!ok) klua_typeerror(L, 2, "world:instructions", "integer");
        if (n < 0) klua_argerror(L, 2, "world:instructions", "the budget must be 0 (none) or more");
        if (!kw->owned) klua_fail(L, "world:instructions", "the host sets the budget of its world");
        kw->instructions = n;
    }
    lua_pushinteger(L, (lua_Integer)kw->instructions);
    return 1;
}

void kiln_lua_set_instructions(lua_State *L, int idx, int64_t instructions) {
    klua_world *kw = klua_check_world(L, idx);
    kw->instructions = instructions > 0 ? instructions : 0;
}

/* world:remove_system(name): the system leaves the schedule (at the end of the frame when
 * called while the schedule runs); its name may be used again at once. */
static int w_remove_system(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:remove_system";
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, fname, "system name");
    size_t len;
    const char *name = lua_tolstring(L, 2, &len);
    kiln_schedule *sched = klua_schedule(L, kw);
    if (klua_name_ok(name, len)) check_own(L, kw, name, fname);
    if (!klua_name_ok(name, len) || kiln_schedule_remove(sched, name) != KILN_OK)
        klua_argerror(L, 2, fname, "no system named '%s'", klua_quote(L, name, len));
    return 0;
}

/* world:dropped() -> how many queued changes the world dropped as they landed, and the last
 * one's message (nil: none); on a mod's view, those its mod queued. */
static int w_dropped(lua_State *L) {
    klua_world *kw = klua_self(L);
    int64_t n = 0;
    const char *message = NULL;
    if (kw->mod_hooks) n = kw->mod_hooks->dropped(kw, &message);
    else kiln_world_dropped(kw->world, &n, &message);
    lua_pushinteger(L, (lua_Integer)n);
    if (message[0]) lua_pushstring(L, message);
    else lua_pushnil(L);
    return 2;
}

static const luaL_Reg system_methods[] = {
    {"dropped", w_dropped},
    {"system", w_system},
    {"remove_system", w_remove_system},
    {"instructions", w_instructions},
    {"progress", w_progress},
    {"systems", w_systems},
    {"enable", w_enable},
    {"failures", w_failures},
    {"max_failures", w_max_failures},
    {NULL, NULL},
};

void klua_open_systems(lua_State *L) { klua_addmethods(L, KLUA_WORLD, system_methods); }
