/* query.c: the kiln.Query class: cached queries from Lua, their row views, and the C step of
 * `for e, a, b in q:each()` (iteration.c runs the rows). Invariant: a query has at most one
 * iteration running; while it runs the world is deferred, and its views belong to the current row. */
#include <stdarg.h>
#include <string.h>

#include "klua.h"

#define KEY KLUA_FIELD_KEY
/* Upvalues of the generic-for step closure and of the view metamethods. */
enum { EACH_UPV_QUERY = 1, EACH_UPV_DATA, EACH_UPV_PROXIES, EACH_UPV_KEYS, EACH_UPV_COUNT = EACH_UPV_KEYS };
/* When they fit (kq->upv_rows), the step closure also holds, after EACH_UPV_COUNT, the data
 * view of each term, the proxy of each term, then every field key: a row is filled and read
 * back through upvalues, with no table look-up to find a view or a key. */
#define EACH_MAX_UPVALUES 255

/* Where the views and field keys of a row live: consecutive upvalues (dir -1, as
 * lua_upvalueindex counts down) or consecutive stack slots (dir 1). */
typedef struct row_slots {
    int view0, proxy0, key0, dir;
} row_slots;

#define VIEW_AT(rs, t) ((rs)->view0 + (rs)->dir * (t))
#define PROXY_AT(rs, t) ((rs)->proxy0 + (rs)->dir * (t))
#define KEY_AT(rs, kq, t, f) ((rs)->key0 + (rs)->dir * ((kq)->key_off[t] + (f)))
/* View metamethods' upvalues: the query (held: a view kept past its loop keeps its query), the
 * term, and the component's name (a closed world's component names went with it). */
/* A view metamethod's upvalues. The query is held weakly (VIEW_UPV_BOX is a box {query} with
 * weak values): LuaJIT's compiled code keeps the metatable of a view it read or wrote as a
 * constant, and a metatable holding its query would keep the query's world alive until
 * jit.flush. A view outlives its loop only as garbage, so a query gone is a loop ended. */
enum { VIEW_UPV_BOX = 1, VIEW_UPV_TERM, VIEW_UPV_NAME, VIEW_UPV_COUNT = VIEW_UPV_NAME };
/* Keys of the bulk table (KLUA_QUERY_UV_BULK): arrays by (term, field), the snapshot block. */

static int each_step(lua_State *L);

klua_query *klua_query_check(lua_State *L, int idx) {
    klua_query *kq = idx == 1 ? klua_check_self(L, KLUA_QUERY, "query") : luaL_testudata(L, idx, KLUA_QUERY);
    if (!kq) luaL_typeerror(L, idx, KLUA_QUERY);
    if (!kq->query || kq->kw->closed) klua_query_gone(L, kq);
    return kq;
}

/* Raises from a view metamethod, at the line of the script that used the view. */
static int view_error(lua_State *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    luaL_where(L, 2);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

/* The component name of the view whose metamethod runs. */
static const char *view_name(lua_State *L) { return lua_tostring(L, lua_upvalueindex(VIEW_UPV_NAME)); }

/* The query and term of the view whose metamethod runs, checked: the metamethods are in reach
 * of debug.getmetatable and their upvalues of debug.setupvalue. The query is pushed (it
 * stays alive while the metamethod runs), or NULL is returned when it was collected. */
static klua_query *view_query(lua_State *L, int *t) {
    int box = lua_upvalueindex(VIEW_UPV_BOX);
    if (lua_type(L, box) != LUA_TTABLE) luaL_error(L, "a view's metamethod was changed through the debug library");
    lua_rawgeti(L, box, 1);
    if (lua_isnil(L, -1)) return NULL;
    klua_query *kq = klua_toobject(L, -1, KLUA_QUERY);
    lua_Integer term = lua_tointeger(L, lua_upvalueindex(VIEW_UPV_TERM));
    if (!kq || term < 0 || term >= kq->term_count || !lua_isstring(L, lua_upvalueindex(VIEW_UPV_NAME)))
        luaL_error(L, "a view's metamethod was changed through the debug library");
    *t = (int)term;
    return kq;
}

/* Errors from view metamethods (upvalues: VIEW_UPV_*). */
static int view_missing(lua_State *L) {
    int t, args = lua_gettop(L); /* 2: __index, 3: __newindex */
    lua_settop(L, 3);
    klua_query *kq = view_query(L, &t); /* pushed at 4 */
    luaL_checktype(L, 1, LUA_TTABLE); /* a view, unless the metamethod was called by hand */
    if (!kq || !kq->active || kq->kw->closed)
        return view_error(L, "a %s view was used after its loop ended", view_name(L));
    if (klua_field_named(L, &kq->info[t], 2)) {
        if (args < 3) return 0; /* a field set to nil earlier in the row reads nil */
        lua_pushvalue(L, 2);    /* and can be set again */
        lua_pushvalue(L, 3);
        lua_rawset(L, 1);
        return 0;
    }
    if (lua_type(L, 2) != LUA_TSTRING)
        return view_error(L, "%s fields are named by strings, got a %s key", view_name(L), luaL_typename(L, 2));
    size_t n;
    const char *name = lua_tolstring(L, 2, &n);
    return view_error(L, "%s has no field '%s'", view_name(L), klua_quote(L, name, n));
}

static int view_readonly(lua_State *L) {
    int t;
    klua_query *kq = view_query(L, &t);
    if (!kq || !kq->active || kq->kw->closed)
        return view_error(L, "a %s view was used after its loop ended", view_name(L));
    if (kq->kw->host && klua_mod_readonly(kq->kw, kq->terms[t]))
        return view_error(L, "%s is read-only to mods (the host lists it in kiln.mods' readonly)", view_name(L));
    const char *sys = klua_system_name(kq->kw);
    if (sys)
        return view_error(L, "system '%s' cannot write %s: it is read-only (declared only in reads)", sys, view_name(L));
    return view_error(L, "%s is read-only here (declare it in writes to change it)", view_name(L));
}

/* Reads a zero-terminated list of names at field key of the table at idx. */
static int read_terms(lua_State *L, klua_world *kw, int idx, const char *key, kiln_component *dest,
                      int max, const char *fname) {
    lua_pushstring(L, key);
    lua_rawget(L, idx); /* raw: a desc table's metamethods never run mid-call */
    int n = 0;
    if (!lua_isnil(L, -1)) {
        static const char *const no_keys[] = {NULL};
        if (!lua_istable(L, -1)) klua_argerror(L, idx, fname, "%s must be a list of component names", key);
        klua_check_keys(L, -1, idx, fname, no_keys, true);
        int len = (int)lua_rawlen(L, -1);
        if (len > max) klua_argerror(L, idx, fname, "at most %d %s terms", max, key);
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, -1, i);
            dest[n++] = klua_check_component(L, kw, -1, idx, fname);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

/* Raises naming the first component desc lists twice, across its three lists: a malformed
 * argument, raised as one before the core is asked (which would refuse it all the same). */
static void check_distinct(lua_State *L, klua_world *kw, const kiln_query_desc *desc, const char *fname) {
    kiln_component all[3 * KILN_QUERY_MAX_TERMS];
    int n = 0;
    const kiln_component *lists[3] = {desc->with, desc->optional, desc->without};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < KILN_QUERY_MAX_TERMS && lists[l][i]; i++) all[n++] = lists[l][i];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (all[i] == all[j]) {
                kiln_component_info info;
                kiln_component_info_get(kw->world, all[i], &info);
                klua_argerror(L, 2, fname, "%s appears twice in the terms", info.name);
            }
}

/* world:query{"A", "B", optional = {...}, without = {...}} */
int klua_world_query(lua_State *L) {
    static const char *const keys[] = {"optional", "without", NULL};
    klua_world *kw = klua_self(L);
    const char *fname = "world:query";
    if (!lua_istable(L, 2)) klua_typeerror(L, 2, fname, "table");
    klua_check_keys(L, 2, 2, fname, keys, true);
    kiln_query_desc desc;
    memset(&desc, 0, sizeof desc);
    int with = (int)lua_rawlen(L, 2);
    if (with == 0) klua_argerror(L, 2, fname, "list at least one component, as in world:query{\"Position\"}");
    if (with > KILN_QUERY_MAX_TERMS) klua_argerror(L, 2, fname, "at most %d terms", KILN_QUERY_MAX_TERMS);
    for (int i = 1; i <= with; i++) {
        lua_rawgeti(L, 2, i);
        desc.with[i - 1] = klua_check_component(L, kw, -1, 2, fname);
        lua_pop(L, 1);
    }
    int optional = read_terms(L, kw, 2, "optional", desc.optional, KILN_QUERY_MAX_TERMS, fname);
    read_terms(L, kw, 2, "without", desc.without, KILN_QUERY_MAX_TERMS, fname);
    check_distinct(L, kw, &desc, fname);
    /* Matching walks every archetype of the world and sorts those that match: in a world of
     * 20,000 archetypes, 7 ms a query, which a mod's loop made for a few instructions each
     * (a budget of 10,000 ran 0.2 s). Charged by the archetypes before anything is made. */
    kiln_world_stats st;
    kiln_world_stats_get(kw->world, &st);
    klua_budget_charge(L, (double)st.archetypes * KLUA_COST_QUERY_ARCHETYPE, fname);

    /* the row snapshots and stages of the data terms live after the struct, in the query's
     * own block: no user value a host script could replace (debug.setuservalue) holds them */
    size_t snap_bytes = 0;
    kiln_component_info infos[KLUA_MAX_TERMS];
    for (int t = 0; t < with + optional; t++) {
        kiln_component_info_get(kw->world, t < with ? desc.with[t] : desc.optional[t - with], &infos[t]);
        snap_bytes += 2 * ((infos[t].size + 15) & ~(size_t)15); /* the snapshot, then the stage */
    }
    size_t head = (sizeof(klua_query) + 15) & ~(size_t)15;
    klua_query *kq = klua_newobject(L, head + snap_bytes, KLUA_QUERY_UV_COUNT, KLUA_QUERY);
    int q_idx = lua_gettop(L);
    memset(kq, 0, sizeof *kq);
    kq->kw = kw;
    kq->row = -1;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_WORLD);
    kiln_query *q;
    if (kiln_query_create(kw->world, &desc, &q) != KILN_OK) klua_fail_world(L, kw->world, fname);
    if (kw->mod_hooks) kw->mod_hooks->query_made(L, kw, q, fname);
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    klua_query_link *link = fa(ud, NULL, 0, sizeof *link);
    if (!link) {
        kiln_query_destroy(q);
        klua_no_memory(L);
    }
    *link = (klua_query_link){q, NULL, kw->queries};
    if (kw->queries) kw->queries->prev = link;
    kw->queries = link;
    kq->link = link;
    kq->query = q;
    kw->query_count++;
    kq->term_count = with + optional;
    kq->with_count = with;
    for (int t = 0; t < kq->term_count; t++) {
        kq->terms[t] = t < with ? desc.with[t] : desc.optional[t - with];
        kiln_component_info_get(kw->world, kq->terms[t], &kq->info[t]);
        kq->all_floats[t] = !kq->info[t].has_check && kq->info[t].field_count <= 64;
        for (int32_t f = 0; f < kq->info[t].field_count; f++)
            kq->all_floats[t] &= kq->info[t].fields[f].type == KILN_TYPE_FLOAT && kq->info[t].fields[f].count == 1;
        kq->kind[t] = klua_is_lua_valued(kw, kq->terms[t]) ? TERM_LUA
                      : kq->info[t].size == 0               ? TERM_TAG
                                                            : TERM_DATA;
    }
    /* Views: a data table per term (unknown fields raise) and a read-only proxy over it. */
    lua_createtable(L, 1, 0); /* the metamethods' box {query} (VIEW_UPV_BOX) */
    if (luaL_getsubtable(L, LUA_REGISTRYINDEX, KLUA_REG_VALUES) == 0) { /* weak values */
        lua_pushliteral(L, "v");
        lua_setfield(L, -2, "__mode");
    }
    lua_setmetatable(L, -2);
    lua_pushvalue(L, q_idx);
    lua_rawseti(L, -2, 1);
    int box_idx = lua_gettop(L);
    lua_createtable(L, kq->term_count, 0);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        lua_createtable(L, 0, kq->info[t].field_count); /* data */
        lua_createtable(L, 0, 3);                        /* its metatable, protected: */
        lua_pushliteral(L, "kiln.View");                 /* filling a row may run __newindex */
        lua_setfield(L, -2, "__metatable");
        lua_pushvalue(L, box_idx);
        lua_pushinteger(L, t);
        lua_pushstring(L, kq->info[t].name);
        lua_pushcclosure(L, view_missing, VIEW_UPV_COUNT);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "__index");
        lua_setfield(L, -2, "__newindex");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, t + 1);                       /* data tables */
        lua_createtable(L, 0, 0);                        /* proxy */
        lua_createtable(L, 0, 3);
        lua_pushliteral(L, "kiln.View");
        lua_setfield(L, -2, "__metatable");
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "__index");
        lua_pushvalue(L, box_idx);
        lua_pushinteger(L, t);
        lua_pushstring(L, kq->info[t].name);
        lua_pushcclosure(L, view_readonly, VIEW_UPV_COUNT);
        lua_setfield(L, -2, "__newindex");
        lua_setmetatable(L, -2);
        lua_rawseti(L, -3, t + 1);                       /* proxies */
        lua_pop(L, 1);
    }
    lua_remove(L, box_idx); /* the closures hold it */
    lua_setiuservalue(L, -3, KLUA_QUERY_UV_PROXIES);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_DATA);
    klua_query **guard = klua_newobject(L, sizeof *guard, KLUA_GUARD_UV_COUNT, KLUA_GUARD);
    *guard = kq;
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, KLUA_GUARD_UV_QUERY); /* the guard keeps its query alive */
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_GUARD);
    lua_newtable(L);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_BULK);
    lua_createtable(L, 0, 0);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_INERT);
    uint8_t *snap = (uint8_t *)kq + head;
    for (int t = 0; t < kq->term_count; t++) {
        size_t part = (kq->info[t].size + 15) & ~(size_t)15;
        if (kq->kind[t] == TERM_DATA) kq->snap[t] = snap, kq->stage[t] = snap + part;
        snap += 2 * part;
    }
    /* Interned field names, so filling a view never hashes a C string. */
    lua_createtable(L, 0, 0);
    int nkeys = 0;
    for (int t = 0; t < kq->term_count; t++) {
        kq->key_off[t] = (int16_t)nkeys;
        for (int32_t f = 0; f < kq->info[t].field_count; f++) {
            lua_pushstring(L, kq->info[t].fields[f].name);
            lua_rawseti(L, -2, KEY(t, f));
            nkeys++;
        }
    }
    kq->key_count = (int16_t)nkeys;
    kq->upv_rows = EACH_UPV_COUNT + 2 * kq->term_count + nkeys <= EACH_MAX_UPVALUES;
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, -3, KLUA_QUERY_UV_KEYS);
    /* The iterator q:each() hands out: one closure per query, so loops make no garbage. */
    int keys_idx = lua_gettop(L); /* the query is still at q_idx */
    luaL_checkstack(L, EACH_MAX_UPVALUES + 4, "too many terms");
    lua_pushvalue(L, q_idx);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_DATA);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_PROXIES);
    lua_pushvalue(L, keys_idx); /* query, data, proxies, keys: the EACH_UPV_* order */
    int n = EACH_UPV_COUNT;
    if (kq->upv_rows) {
        int data_idx = q_idx + 3, proxies_idx = q_idx + 4;
        for (int t = 0; t < kq->term_count; t++) lua_rawgeti(L, data_idx, t + 1);
        for (int t = 0; t < kq->term_count; t++) lua_rawgeti(L, proxies_idx, t + 1);
        for (int t = 0; t < kq->term_count; t++)
            for (int32_t f = 0; f < kq->info[t].field_count; f++) lua_rawgeti(L, keys_idx, KEY(t, f));
        n += 2 * kq->term_count + nkeys;
    }
    lua_pushcclosure(L, each_step, n);
    klua_jit_unpin(L); /* LuaJIT: a loop's trace must not keep the query and its world */
    lua_setiuservalue(L, q_idx, KLUA_QUERY_UV_EACH);
    lua_settop(L, q_idx);
    return 1;
}

/* Pushes the views and field keys of the Query at q_idx as consecutive stack slots and
 * describes them in rs (for loops run from C, and queries too wide for upvalues). */
static void push_row_slots(lua_State *L, klua_query *kq, int q_idx, row_slots *rs) {
    /* room for the slots, then for a row (push_row, write_back) and a call's arguments */
    luaL_checkstack(L, 3 * kq->term_count + kq->key_count + KILN_MAX_FIELDS + LUA_MINSTACK,
                    "too many terms");
    klua_query_uv(L, q_idx, KLUA_QUERY_UV_DATA, "query:each");
    klua_query_uv(L, q_idx, KLUA_QUERY_UV_PROXIES, "query:each");
    klua_query_uv(L, q_idx, KLUA_QUERY_UV_KEYS, "query:each");
    int data_idx = lua_gettop(L) - 2, proxies_idx = data_idx + 1, keys_idx = data_idx + 2;
    rs->dir = 1;
    rs->view0 = lua_gettop(L) + 1;
    klua_query_views(L, kq, data_idx, "query:each"); /* filled by raw sets: tables only */
    rs->proxy0 = lua_gettop(L) + 1; /* the proxies and keys are only handed out or compared */
    for (int t = 0; t < kq->term_count; t++) lua_rawgeti(L, proxies_idx, t + 1);
    rs->key0 = lua_gettop(L) + 1;
    for (int t = 0; t < kq->term_count; t++)
        for (int32_t f = 0; f < kq->info[t].field_count; f++) lua_rawgeti(L, keys_idx, KEY(t, f));
}

/* The slots of the step closure's upvalues (kq->upv_rows). */
static void upvalue_row_slots(const klua_query *kq, row_slots *rs) {
    rs->dir = -1;
    rs->view0 = lua_upvalueindex(EACH_UPV_COUNT + 1);
    rs->proxy0 = lua_upvalueindex(EACH_UPV_COUNT + 1 + kq->term_count);
    rs->key0 = lua_upvalueindex(EACH_UPV_COUNT + 1 + 2 * kq->term_count);
}

/* Writes back the fields the script changed in the writable views of the current row
 * (klua_query_write_row, the values read from the views): the whole row or, on an error,
 * nothing of it. */
static void write_back(lua_State *L, klua_query *kq, const row_slots *rs) {
    int first[KLUA_MAX_TERMS], top = lua_gettop(L);
    if (kq->key_count + 8 > LUA_MINSTACK) luaL_checkstack(L, kq->key_count + 8, "too many fields");
    for (int t = 0; t < kq->term_count; t++) {
        first[t] = 0;
        if (kq->kind[t] != TERM_DATA || !kq->writable[t] || !kq->it.columns[t]) continue;
        int view = VIEW_AT(rs, t);
        first[t] = lua_gettop(L) + 1;
        for (int32_t f = 0; f < kq->info[t].field_count; f++) {
            lua_pushvalue(L, KEY_AT(rs, kq, t, f));
            lua_rawget(L, view);
        }
    }
    klua_query_write_row(L, kq, first);
    lua_settop(L, top);
}

/* Pushes the entity of the current row and its views; returns the number pushed. */
static int push_row(lua_State *L, klua_query *kq, const row_slots *rs) {
    if (kq->term_count + 8 > LUA_MINSTACK) luaL_checkstack(L, kq->term_count + 8, "too many terms");
    lua_pushinteger(L, (lua_Integer)kq->it.entities[kq->row]);
    for (int t = 0; t < kq->term_count; t++) {
        if (klua_query_push_simple(L, kq, t)) continue;
        void *col = kq->it.columns[t];
        if (!col) {
            lua_pushnil(L); /* an optional term this archetype lacks */
            continue;
        }
        const kiln_component_info *info = &kq->info[t];
        const uint8_t *src = (const uint8_t *)col + (size_t)kq->row * info->stride;
        memcpy(kq->snap[t], src, info->size);
        src = kq->snap[t]; /* the query's own copy: fills run no risk from the collector */
        int view = VIEW_AT(rs, t);
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            lua_pushvalue(L, KEY_AT(rs, kq, t, f)); /* the interned key: no string look-up */
            if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                float v;
                memcpy(&v, src + fd->offset, 4);
                lua_pushnumber(L, v);
            } else {
                klua_push_field(L, fd, src);
            }
            lua_rawset(L, view);
        }
        lua_pushvalue(L, kq->writable[t] ? view : PROXY_AT(rs, t));
    }
    return 1 + kq->term_count;
}

/* The generic-for step (upvalues: EACH_UPV_*, then the row's slots when kq->upv_rows). */
static int each_step(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(EACH_UPV_QUERY));
    if (!kq->active || kq->kw->closed || kq->loop_L != L) return 0; /* no rows for a loop ended */
    klua_query_check_owner(L, kq);
    row_slots rs;
    if (kq->upv_rows) upvalue_row_slots(kq, &rs);
    else push_row_slots(L, kq, lua_upvalueindex(EACH_UPV_QUERY), &rs); /* below the results */
    if (kq->row >= 0) write_back(L, kq, &rs);
    if (!klua_query_advance(L, kq, lua_upvalueindex(EACH_UPV_QUERY))) return 0;
    return push_row(L, kq, &rs);
}

static int guarded_write_back(lua_State *L) {
    klua_query *kq = lua_touserdata(L, 1);
    row_slots rs;
    push_row_slots(L, kq, 2, &rs);
    write_back(L, kq, &rs);
    return 0;
}

static int q_each(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    if (!lua_isnoneornil(L, 2)) /* q:each(fn) visited nothing and said nothing */
        klua_argerror(L, 2, "query:each", "no argument expected, got %s: a function run per row is an "
                      "each system's, or q:bulk(fn)'s", luaL_typename(L, 2));
    if (!kq->step_made && !kq->active) { /* on first use: queries never looped this way pay nothing */
        klua_query_make_step(L, kq, 1);
        kq->step_made = true;
    }
    klua_query_begin(L, kq, 1, "query:each");
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_EACH);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_GUARD); /* closes the iteration on break or error */
    return 4;
}

static int guard_close(lua_State *L) {
    klua_query **guard = klua_toobject(L, 1, KLUA_GUARD); /* debug.getmetatable reaches it */
    /* its query is the one its user value holds (and keeps alive): one a host script put
     * there instead (debug.setuservalue) is not its own, and a guard whose query went with
     * it closes nothing */
    if (!guard) return 0;
    lua_getiuservalue(L, 1, KLUA_GUARD_UV_QUERY);
    int q_idx = lua_gettop(L);
    klua_query *kq = klua_toobject(L, q_idx, KLUA_QUERY) == *guard ? *guard : NULL;
    /* one guard per query: closed from another thread while the loop's own thread runs, it
     * is an earlier loop's, ended (a stuck loop's thread may be closed from anywhere) */
    if (kq && kq->active && !kq->kw->closed && !klua_query_runs_elsewhere(L, kq)) {
        /* Left by break or return (no error): the current row's writes still land. A
         * conversion error here ends the iteration first, then propagates. */
        if (lua_isnoneornil(L, 2) && kq->row >= 0) {
            lua_pushlightuserdata(L, kq);
            lua_pushvalue(L, q_idx);
            if (klua_pcall_c(L, guarded_write_back, 2, 0, 0) != LUA_OK) {
                klua_query_finish(L, kq, q_idx);
                return lua_error(L);
            }
        }
        if (lua_isnoneornil(L, 2)) klua_query_end(L, kq, q_idx, "query:each"); /* raises from the close */
        else klua_query_finish(L, kq, q_idx); /* the error that left the loop goes on */
    }
    return 0;
}

void klua_query_each_call(lua_State *L, int q_idx, int fn_idx, int extra_idx, int64_t fn_cost) {
    q_idx = lua_absindex(L, q_idx);
    fn_idx = lua_absindex(L, fn_idx);
    if (extra_idx) extra_idx = lua_absindex(L, extra_idx);
    klua_query *kq = klua_query_check(L, q_idx);
    klua_query_begin(L, kq, q_idx, "query:each");
    int top = lua_gettop(L);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_GUARD); /* marks the loop running (klua_query_begin) */
    row_slots rs;
    push_row_slots(L, kq, q_idx, &rs);
    bool rows_begun = false;
    while (klua_query_advance(L, kq, q_idx)) {
        lua_pushvalue(L, fn_idx);
        int n = push_row(L, kq, &rs);
        if (extra_idx) lua_pushvalue(L, extra_idx);
        if (!rows_begun) { /* on the first row, so a query with none arms nothing (push_row
                            * fills views by raw sets: it calls nothing the row mode could see) */
            klua_budget_rows_begin(L, kq->kw, fn_cost);
            rows_begun = true;
        }
        klua_budget_row(L, kq->kw);
        lua_call(L, n + (extra_idx ? 1 : 0), 0); /* an error unwinds to the system runner */
        write_back(L, kq, &rs);
    }
    klua_budget_rows_end(L, kq->kw);
    lua_settop(L, top);
}

/* Called by the system runner after an each-system, whether it raised or not. */
void klua_query_abort(lua_State *L, int q_idx) {
    klua_query *kq = luaL_checkudata(L, q_idx, KLUA_QUERY);
    klua_query_finish(L, kq, lua_absindex(L, q_idx));
}

static int q_count(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    klua_budget_walk(L, kiln_query_archetype_count(kq->query), "query:count");
    lua_pushinteger(L, (lua_Integer)kiln_query_count(kq->query));
    return 1;
}

static int q_gc(lua_State *L) {
    klua_query *kq = klua_toobject(L, 1, KLUA_QUERY); /* a finalizer never raises */
    if (!kq) return 0;
    if (kq->query && !kq->kw->closed) {
        if (kq->active) klua_query_finish(L, kq, 1);
        kiln_query_destroy(kq->query);
        kq->kw->query_count--;
        klua_query_link *link = kq->link;
        if (link->prev) link->prev->next = link->next;
        else kq->kw->queries = link->next;
        if (link->next) link->next->prev = link->prev;
        void *ud;
        lua_Alloc fa = lua_getallocf(L, &ud);
        fa(ud, link, sizeof *link, 0);
    }
    kq->query = NULL;
    kq->link = NULL;
    return 0;
}

static int q_tostring(lua_State *L) {
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    if (!kq->query || kq->kw->closed) {
        lua_pushstring(L, kq->kw->closed ? "kiln.Query (closed)" : "kiln.Query (released)");
        return 1;
    }
    /* The names (the world's) are copied before any Lua object is made: making one may run a
     * finalizer that closes the world and frees them. */
    char names[KLUA_MAX_TERMS * (KILN_MAX_NAME + 2) + 1];
    size_t n = 0;
    for (int t = 0; t < kq->term_count; t++) {
        size_t len = strlen(kq->info[t].name);
        if (len > KILN_MAX_NAME) len = KILN_MAX_NAME;
        if (t) names[n++] = ',', names[n++] = ' ';
        memcpy(names + n, kq->info[t].name, len);
        n += len;
    }
    names[n] = '\0';
    lua_pushfstring(L, "kiln.Query {%s} (%I entities)", names, (lua_Integer)kiln_query_count(kq->query));
    return 1;
}

/* q:entities([limit]) -> the matched entities, in iteration order, at most limit of them:
 * a listing for tools that visits no row's values, so it stamps nothing changed (a view loop
 * under LuaJIT stamps every row of a writable term it visits). */
static int q_entities(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    int64_t limit = kiln_query_count(kq->query);
    if (!lua_isnoneornil(L, 2)) {
        int exact = 0;
        lua_Integer n = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &exact) : 0;
        if (!exact || n < 0) {
            if (lua_type(L, 2) == LUA_TNUMBER)
                klua_argerror(L, 2, "query:entities", "limit (integer >= 0) expected, got %s",
                              lua_tostring(L, 2));
            klua_argerror(L, 2, "query:entities", "limit (integer >= 0) expected, got %s",
                          luaL_typename(L, 2));
        }
        if (n < limit) limit = n;
    }
    /* inside a system, as for q:each: every term declared in reads or writes */
    for (int t = 0; t < kq->term_count; t++) klua_check_access(L, kq->kw, kq->terms[t], false, "query:entities");
    klua_budget_walk(L, kiln_query_archetype_count(kq->query), "query:entities"); /* counted and listed */
    lua_createtable(L, limit < INT32_MAX ? (int)limit : 0, 0);
    klua_query_check(L, 1); /* making the list may run a finalizer that closed the world */
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(kq->query, &it);
    while (n < limit && kiln_query_next(&it))
        for (int32_t r = 0; r < it.count && n < limit; r++) {
            lua_pushinteger(L, (lua_Integer)it.entities[r]);
            lua_rawseti(L, -2, ++n);
        }
    if (kiln_iter_fini(&it) != KILN_OK) /* as a loop's end (klua_query_end): a finalizer's changes */
        klua_fail(L, "query:entities", "%s (the loop's changes that did not land stay queued)",
                  klua_core_detail(kiln_world_error(kq->kw->world)));
    return 1;
}

/* q:terms() -> list of term names, for tools. */
static int q_terms(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        klua_query_check(L, 1); /* a finalizer run by the last object made may close the world */
        lua_pushstring(L, kq->info[t].name);
        lua_rawseti(L, -2, t + 1);
    }
    return 1;
}

static const luaL_Reg query_methods[] = {
    {"each", q_each},
    {"count", q_count},
    {"entities", q_entities},
    {"terms", q_terms},
    {NULL, NULL},
};

static const luaL_Reg query_meta[] = {
    {"__gc", q_gc},
    {"__tostring", q_tostring},
    {NULL, NULL},
};

static const luaL_Reg guard_meta[] = {
    {"__close", guard_close},
    {NULL, NULL},
};

static const luaL_Reg query_world_methods[] = {
    {"query", klua_world_query},
    {NULL, NULL},
};

void klua_open_query(lua_State *L) {
    klua_createmeta(L, KLUA_QUERY, query_methods, query_meta);
    klua_createmeta(L, KLUA_GUARD, NULL, guard_meta);
    klua_addmethods(L, KLUA_WORLD, query_world_methods);
}
