/* determinism.c: World methods for runs that replay the same: seed and random (the world's
 * seeded streams, one per Lua system and tick), hash and content_hash (of the world's logical
 * content, with and without its free slots), and snapshot / restore (the whole world in
 * memory, the host's only). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kiln_persist.h"
#include "klua.h"

#define KLUA_SNAPSHOT "kiln.Snapshot"

/* User values of a kiln.Snapshot. */
enum klua_snapshot_uv { SNAPSHOT_UV_WORLD = 1, SNAPSHOT_UV_COUNT = SNAPSHOT_UV_WORLD };

typedef struct klua_snapshot {
    kiln_snapshot *snap;
    klua_world *kw;
} klua_snapshot;

/* ---- 64-bit integers on both interpreters ---- */

/* The largest integer every number in its range is exact for under LuaJIT (a double). */
#define EXACT_MAX ((lua_Integer)1 << 53)

/* Integer argument arg of fname. Under LuaJIT one outside [-2^53, 2^53] may already have lost
 * its low bits (it came as a double), so it is refused rather than used rounded. */
static lua_Integer exact_integer(lua_State *L, int arg, const char *fname) {
    int ok;
    lua_Integer v = lua_tointegerx(L, arg, &ok);
    if (!ok) klua_typeerror(L, arg, fname, "integer");
    if (KLUA_LUAJIT && (v > EXACT_MAX || v < -EXACT_MAX)) {
        char text[32];
        snprintf(text, sizeof text, "%" PRId64, (int64_t)v);
        klua_argerror(L, arg, fname, "%s is outside [-2^53, 2^53], where LuaJIT's numbers hold every integer exactly",
                      text);
    }
    return v;
}

/* Pushes v as 16 lowercase hex digits: exact, and the same text on either interpreter. */
static void push_hex(lua_State *L, uint64_t v) {
    char text[17];
    snprintf(text, sizeof text, "%016" PRIx64, v);
    lua_pushlstring(L, text, 16);
}

/* The form argument arg of fname: true for "hex", false when absent (nil); raises otherwise. */
static bool hex_form(lua_State *L, int arg, const char *fname) {
    if (lua_isnoneornil(L, arg)) return false;
    if (lua_type(L, arg) != LUA_TSTRING) klua_typeerror(L, arg, fname, "\"hex\" or nil");
    size_t len;
    const char *form = lua_tolstring(L, arg, &len);
    if (len != 3 || memcmp(form, "hex", 3) != 0) /* (a script's text quoted only in part) */
        klua_argerror(L, arg, fname, "form '%s' is not \"hex\"", klua_quote(L, form, len));
    return true;
}

/* ---- seeded random ---- */

static int w_seed(lua_State *L) {
    bool setting = lua_gettop(L) >= 2 && lua_type(L, 2) != LUA_TSTRING;
    klua_world *kw = klua_self(L);
    if (!setting) {
        bool hex = hex_form(L, 2, "world:seed");
        kiln_component id = kiln_component_lookup(kw->world, "RandomSeed");
        const uint64_t *at = id ? kiln_resource_get(kw->world, id) : NULL;
        uint64_t seed = at ? *at : 0;
        push_hex(L, seed);
        if (hex) return 1;
        if (KLUA_LUAJIT && ((lua_Integer)seed > EXACT_MAX || (lua_Integer)seed < -EXACT_MAX))
            klua_fail(L, "world:seed", "the seed (hex %s) is outside [-2^53, 2^53], where LuaJIT's numbers hold "
                      "every integer exactly: read it with world:seed(\"hex\")", lua_tostring(L, -1));
        lua_pushinteger(L, (lua_Integer)seed);
        return 1;
    }
    lua_Integer seed = exact_integer(L, 2, "world:seed");
    if (kw->host) klua_fail(L, "world:seed", "the host seeds the world");
    if (kiln_random_seed(kw->world, (uint64_t)seed) != KILN_OK) klua_fail_world(L, kw->world, "world:seed");
    return 0;
}

/* The stream world:random draws from now: inside a Lua system, the system's, forked from
 * (seed, system, tick) and copied to *local (stream_done keeps what was drawn); elsewhere the
 * world's main stream. */
static kiln_random *stream(lua_State *L, klua_world *kw, kiln_random *local, const char *fname) {
    klua_system *sys = kw->current;
    if (!sys) {
        kiln_random *r = kiln_random_world(kw->world);
        if (!r) klua_fail_world(L, kw->world, fname);
        return r;
    }
    /* forked again in a frame run again after a restore: it draws the same numbers */
    kiln_tick tick = kiln_tick_current(kw->world), key = klua_frame_key(kw->world);
    if (sys->random_tick != key) {
        *local = kiln_random_fork(kw->world, sys->name, tick);
        memcpy(sys->random, local->s, sizeof local->s);
        sys->random_tick = key;
    }
    memcpy(local->s, sys->random, sizeof local->s);
    return local;
}

static void stream_done(klua_world *kw, const kiln_random *local) {
    if (kw->current) memcpy(kw->current->random, local->s, sizeof local->s);
}

uint64_t klua_random_bits(lua_State *L, klua_world *kw, const char *fname) {
    kiln_random local;
    uint64_t bits = kiln_random_next(stream(L, kw, &local, fname));
    stream_done(kw, &local);
    return bits;
}

/* math.random's contract over the world's streams (see stream). */
static int w_random(lua_State *L) {
    int nargs = lua_gettop(L) - 1; /* counted before klua_self pads the arguments */
    klua_world *kw = klua_self(L);
    const char *fname = "world:random";
    lua_Integer lo = 1, hi = 0;
    if (nargs >= 1) hi = exact_integer(L, 2, fname);
    if (nargs >= 2) {
        lo = hi;
        hi = exact_integer(L, 3, fname);
    }
    if (nargs > 2) klua_argerror(L, 4, fname, "at most two arguments expected");
    if (nargs >= 1 && lo > hi) klua_argerror(L, nargs >= 2 ? 3 : 2, fname, "interval is empty");
    kiln_random local;
    kiln_random *r = stream(L, kw, &local, fname);
    if (nargs == 0) lua_pushnumber(L, kiln_random_double(r));
    else lua_pushinteger(L, (lua_Integer)kiln_random_range(r, lo, hi));
    stream_done(kw, &local);
    return 1;
}

/* ---- hash, snapshots ---- */

/* Reads every value of every entity: not from a system beside others (C systems may be writing
 * on workers), and charged to a budget by the entities it walks and sorts (on a fragmented
 * world of a million, 20-90 ns each; uncharged, a mod's loop of them held the host 34 times
 * its time limit), and by the slots not alive, whose free list it walks (a world of few
 * entities and a million freed slots took 8 ms a hash). The content hash walks no free list
 * but is charged the same: it may sweep every slot too (the table of live handles by slot,
 * or the slot records when memory for a sorted order is refused), and one price for both
 * leaves a budget nothing to gain by choosing. */
static int push_hash(lua_State *L, bool slots, const char *fname) {
    klua_world *kw = klua_self(L);
    bool hex = hex_form(L, 2, fname);
    if (kw->current && !kw->current->exclusive)
        klua_fail(L, fname, "system '%s' is not exclusive: the hash reads every component", kw->current->name);
    kiln_world_stats st;
    kiln_world_stats_get(kw->world, &st);
    klua_budget_charge(L, (double)st.entities * KLUA_COST_HASH_ENTITY +
                       (double)(st.entity_slots - st.entities) * KLUA_COST_HASH_SLOT, fname);
    uint64_t hash = slots ? kiln_world_hash(kw->world) : kiln_world_content_hash(kw->world);
    /* 0 is the core's refusal (no world hashes to it): from a hook mid-change, or beside running
     * systems, as Lua called from a host's C system is (no Lua system is current there) */
    if (hash == 0) klua_fail_world(L, kw->world, fname);
    if (hex) push_hex(L, hash);
    else lua_pushinteger(L, (lua_Integer)hash); /* LuaJIT: rounded to a double, see lua-api.md */
    return 1;
}

static int w_hash(lua_State *L) { return push_hash(L, true, "world:hash"); }

static int w_content_hash(lua_State *L) { return push_hash(L, false, "world:content_hash"); }

static int w_snapshot(lua_State *L) {
    klua_world *kw = klua_self(L);
    if (kw->host) klua_fail(L, "world:snapshot", "snapshots of the world are the host's");
    klua_snapshot *ks = klua_newobject(L, sizeof *ks, SNAPSHOT_UV_COUNT, KLUA_SNAPSHOT);
    ks->snap = NULL;
    ks->kw = kw;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, SNAPSHOT_UV_WORLD);
    if (kiln_snapshot_create(kw->world, &ks->snap) != KILN_OK) klua_fail_world(L, kw->world, "world:snapshot");
    return 1;
}

/* A mod's tag in a snapshot, as in a save (world:load): the entities are the mod's again
 * while it is loaded, within its entity limit (the manager says). While it is not, a restore
 * brings back no more of them than the world holds kept (mods:unload keep): a snapshot taken
 * before an unload would hand the mod loaded later entities it no longer had, past its limit.
 * Refused whole, before the world changes. */
static void check_owned(lua_State *L, klua_world *kw, const kiln_snapshot *snap) {
    kiln_component count = (kiln_component)kiln_component_count(kw->world);
    for (kiln_component c = 1; c <= count; c++) {
        kiln_component_info info;
        if (!kiln_component_info_get(kw->world, c, &info) || !klua_is_mod_tag(&info)) continue;
        int64_t n = kiln_snapshot_count(kw->world, snap, c);
        char why[240] = "";
        bool mine = false;
        if (n && kw->load_owned && !kw->load_owned(kw, c, n, true, &mine, why, sizeof why))
            klua_fail(L, "world:restore", "%s", why);
        if (!n || mine) continue;
        kiln_query *q;
        if (kiln_query_create(kw->world, &(kiln_query_desc){.with = {c}}, &q) != KILN_OK)
            klua_fail_world(L, kw->world, "world:restore");
        int64_t kept = kiln_query_count(q);
        kiln_query_destroy(q);
        if (n <= kept) continue;
        snprintf(why, sizeof why, "the snapshot holds %lld entities of mod '%s', which is not loaded (%lld kept "
                 "by its unload); load the mod first", (long long)n, info.name + KLUA_MOD_TAG_PREFIX_LEN,
                 (long long)kept);
        klua_fail(L, "world:restore", "%s", why);
    }
}

static int w_restore(lua_State *L) {
    klua_world *kw = klua_self(L);
    if (kw->host) klua_fail(L, "world:restore", "snapshots of the world are the host's");
    klua_snapshot *ks = luaL_testudata(L, 2, KLUA_SNAPSHOT);
    if (!ks) klua_typeerror(L, 2, "world:restore", "snapshot");
    if (!ks->snap) klua_argerror(L, 2, "world:restore", "the snapshot was freed");
    if (ks->kw != kw) klua_argerror(L, 2, "world:restore", "the snapshot is of another world");
    check_owned(L, kw, ks->snap);
    if (kiln_snapshot_restore(kw->world, ks->snap) != KILN_OK) klua_fail_world(L, kw->world, "world:restore");
    return 0;
}

static int snapshot_gc(lua_State *L) {
    klua_snapshot *ks = klua_toobject(L, 1, KLUA_SNAPSHOT); /* a finalizer never raises */
    if (!ks) return 0;
    kiln_snapshot_destroy(ks->snap);
    ks->snap = NULL;
    return 0;
}

static int snapshot_bytes(lua_State *L) {
    klua_snapshot *ks = klua_check_self(L, KLUA_SNAPSHOT, "snapshot");
    lua_pushinteger(L, (lua_Integer)kiln_snapshot_bytes(ks->snap));
    return 1;
}

static const luaL_Reg determinism_methods[] = {
    {"seed", w_seed},
    {"random", w_random},
    {"hash", w_hash},
    {"content_hash", w_content_hash},
    {"snapshot", w_snapshot},
    {"restore", w_restore},
    {NULL, NULL},
};

static const luaL_Reg snapshot_methods[] = {{"bytes", snapshot_bytes}, {NULL, NULL}};
static const luaL_Reg snapshot_meta[] = {{"__gc", snapshot_gc}, {"__close", snapshot_gc}, {NULL, NULL}};

void klua_open_determinism(lua_State *L) {
    klua_addmethods(L, KLUA_WORLD, determinism_methods);
    klua_createmeta(L, KLUA_SNAPSHOT, snapshot_methods, snapshot_meta);
}
