/* query.c: the kiln.Query class: cached queries from Lua, row views for `for e, a, b in
 * q:each()`, and the column-array bulk path. Invariant: a query has at most one iteration
 * running; while it runs the world is deferred, and its views belong to the current row. */
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
enum { VIEW_UPV_QUERY = 1, VIEW_UPV_TERM, VIEW_UPV_COUNT = VIEW_UPV_TERM };
/* Keys of the bulk table (KLUA_QUERY_UV_BULK): arrays by (term, field), the snapshot block. */

static int each_step(lua_State *L);

klua_query *klua_query_check(lua_State *L, int idx) {
    klua_query *kq = idx == 1 ? klua_check_self(L, KLUA_QUERY, "query") : luaL_testudata(L, idx, KLUA_QUERY);
    if (!kq) luaL_typeerror(L, idx, KLUA_QUERY);
    if (!kq->query || kq->kw->closed) luaL_error(L, "attempt to use a query of a closed world");
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

/* Errors from view metamethods (upvalues: VIEW_UPV_*). */
static int view_missing(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(VIEW_UPV_QUERY));
    int t = (int)lua_tointeger(L, lua_upvalueindex(VIEW_UPV_TERM));
    if (!kq->active) return view_error(L, "a %s view was used after its loop ended", kq->info[t].name);
    if (lua_gettop(L) == 3 && lua_type(L, 2) == LUA_TSTRING &&
        klua_find_field(&kq->info[t], lua_tostring(L, 2))) {
        lua_rawset(L, 1); /* a field set to nil earlier in the row, set again */
        return 0;
    }
    if (lua_type(L, 2) != LUA_TSTRING)
        return view_error(L, "%s fields are named by strings, got a %s key", kq->info[t].name, luaL_typename(L, 2));
    size_t n;
    const char *name = lua_tolstring(L, 2, &n);
    return view_error(L, "%s has no field '%s'", kq->info[t].name, klua_quote(L, name, n));
}

static int view_readonly(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(VIEW_UPV_QUERY));
    int t = (int)lua_tointeger(L, lua_upvalueindex(VIEW_UPV_TERM));
    if (!kq->active) return view_error(L, "a %s view was used after its loop ended", kq->info[t].name);
    const char *sys = klua_system_name(kq->kw);
    if (sys)
        return view_error(L, "system '%s' cannot write %s: it is read-only (declared only in reads)", sys, kq->info[t].name);
    return view_error(L, "%s is read-only here (declare it in writes to change it)", kq->info[t].name);
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

    klua_query *kq = lua_newuserdatauv(L, sizeof *kq, KLUA_QUERY_UV_COUNT);
    memset(kq, 0, sizeof *kq);
    kq->kw = kw;
    kq->row = -1;
    luaL_setmetatable(L, KLUA_QUERY);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_WORLD);
    kiln_query *q;
    if (kiln_query_create(kw->world, &desc, &q) != KILN_OK) klua_fail_world(L, kw->world, fname);
    kq->query = q;
    kw->query_count++;
    kq->term_count = with + optional;
    kq->with_count = with;
    for (int t = 0; t < kq->term_count; t++) {
        kq->terms[t] = t < with ? desc.with[t] : desc.optional[t - with];
        kiln_component_info_get(kw->world, kq->terms[t], &kq->info[t]);
        kq->kind[t] = klua_is_lua_valued(kw, kq->terms[t]) ? TERM_LUA
                      : kq->info[t].size == 0               ? TERM_TAG
                                                            : TERM_DATA;
    }
    /* Views: a data table per term (unknown fields raise) and a read-only proxy over it. */
    lua_createtable(L, kq->term_count, 0);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        lua_createtable(L, 0, kq->info[t].field_count); /* data */
        lua_createtable(L, 0, 3);                        /* its metatable, protected: */
        lua_pushliteral(L, "kiln.View");                 /* filling a row may run __newindex */
        lua_setfield(L, -2, "__metatable");
        lua_pushlightuserdata(L, kq);
        lua_pushinteger(L, t);
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
        lua_pushlightuserdata(L, kq);
        lua_pushinteger(L, t);
        lua_pushcclosure(L, view_readonly, VIEW_UPV_COUNT);
        lua_setfield(L, -2, "__newindex");
        lua_setmetatable(L, -2);
        lua_rawseti(L, -3, t + 1);                       /* proxies */
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, -3, KLUA_QUERY_UV_PROXIES);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_DATA);
    klua_query **guard = lua_newuserdatauv(L, sizeof *guard, KLUA_GUARD_UV_COUNT);
    *guard = kq;
    luaL_setmetatable(L, KLUA_GUARD);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, KLUA_GUARD_UV_QUERY); /* the guard keeps its query alive */
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_GUARD);
    lua_newtable(L);
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_BULK);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA) continue;
        kq->snap[t] = lua_newuserdatauv(L, kq->info[t].size, 0);
        lua_rawseti(L, -2, t + 1);
    }
    lua_setiuservalue(L, -2, KLUA_QUERY_UV_SNAPSHOTS);
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
    int q_idx = lua_gettop(L) - 1, keys_idx = lua_gettop(L);
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
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_DATA);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_PROXIES);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_KEYS);
    int data_idx = lua_gettop(L) - 2, proxies_idx = data_idx + 1, keys_idx = data_idx + 2;
    rs->dir = 1;
    rs->view0 = lua_gettop(L) + 1;
    for (int t = 0; t < kq->term_count; t++) lua_rawgeti(L, data_idx, t + 1);
    rs->proxy0 = lua_gettop(L) + 1;
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

/* Empties the views so that a view kept past its loop raises instead of reading a row. */
static void clear_views(lua_State *L, klua_query *kq, int data_idx) {
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA) continue;
        lua_rawgeti(L, data_idx, t + 1);
        for (int32_t f = 0; f < kq->info[t].field_count; f++) {
            lua_pushstring(L, kq->info[t].fields[f].name);
            lua_pushnil(L);
            lua_rawset(L, -3);
        }
        lua_pop(L, 1);
    }
}

/* Records (thread: the running one) or forgets (thread false) the open iteration of the
 * Query at q_idx in its world's KLUA_STATE_LOOPS table, so loops left open can be found. */
static void track_loop(lua_State *L, int q_idx, bool open) {
    q_idx = lua_absindex(L, q_idx);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_WORLD);
    lua_getiuservalue(L, -1, KLUA_WORLD_UV_STATE);
    if (lua_getfield(L, -1, KLUA_STATE_LOOPS) == LUA_TTABLE) {
        lua_pushvalue(L, q_idx);
        if (open) lua_pushthread(L);
        else lua_pushnil(L);
        lua_rawset(L, -3);
    }
    lua_pop(L, 3);
}

void klua_query_finish(lua_State *L, klua_query *kq, int q_idx) {
    if (!kq->active) return;
    kq->active = false;
    kq->row = -1;
    kq->owner = NULL;
    kiln_iter_fini(&kq->it);
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_DATA);
    clear_views(L, kq, lua_gettop(L));
    lua_pop(L, 1);
    track_loop(L, q_idx, false);
}

void klua_query_begin(lua_State *L, klua_query *kq, int q_idx, const char *fname) {
    if (kq->active)
        klua_fail(L, fname, "this query is already being iterated (use a second query for a nested loop)");
    for (int t = 0; t < kq->term_count; t++) {
        klua_check_access(L, kq->kw, kq->terms[t], false, fname);
        kq->writable[t] = kq->kw->current == NULL || klua_system_writes(kq->kw, kq->terms[t]);
    }
    track_loop(L, q_idx, true); /* may raise (memory): before the iteration starts */
    kiln_query_iter(kq->query, &kq->it);
    kq->active = true;
    kq->row = -1;
    kq->owner = kq->kw->current;
}

/* True when the thread that began a loop can no longer end it: suspended in a coroutine,
 * finished, or dead by an error (a running thread, L or one that resumed L, is left alone). */
static bool thread_stuck(lua_State *L, lua_State *co) {
    if (co == L) return false;
    int status = lua_status(co);
    if (status == LUA_YIELD) return true;
    if (status != LUA_OK) return true;
    lua_Debug ar;
    return lua_getstack(co, 0, &ar) == 0 && lua_gettop(co) == 0;
}

void klua_query_close_loops(lua_State *L, klua_world *kw, klua_system *owner, bool stuck_only) {
    klua_push_self(L, kw);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_getiuservalue(L, -1, KLUA_WORLD_UV_STATE);
    lua_getfield(L, -1, KLUA_STATE_LOOPS);
    int loops = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, loops)) {
        klua_query *kq = luaL_testudata(L, -2, KLUA_QUERY);
        bool close = kq && kq->active &&
                     (stuck_only ? thread_stuck(L, lua_tothread(L, -1)) : kq->owner == owner);
        lua_pop(L, 1);
        if (close) klua_query_finish(L, kq, lua_gettop(L)); /* sets an existing field to nil: the traversal goes on */
    }
    lua_pop(L, 3);
}

/* Raises for field fd of the current row (query:each naming field, component, entity). */
static void field_error(lua_State *L, klua_query *kq, int t, const kiln_field *fd, const char *err) {
    char eb[24];
    klua_fail(L, "query:each", "field '%s' of %s on entity %s: %s", fd->name, kq->info[t].name,
              klua_entity_str(kq->it.entities[kq->row], eb), err);
}

/* Writes back the fields the script changed in the writable views of the current row:
 * each field is compared with what the view was filled with, so a field left alone never
 * overwrites a change made meanwhile (world:set on the same row), and marks nothing. A
 * single float still equal to the number it was filled with costs one comparison. */
static void write_back(lua_State *L, klua_query *kq, const row_slots *rs) {
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA || !kq->writable[t] || !kq->it.columns[t]) continue;
        const kiln_component_info *info = &kq->info[t];
        uint8_t *dst = (uint8_t *)kq->it.columns[t] + (size_t)kq->row * info->stride;
        const uint8_t *snap = kq->snap[t];
        _Alignas(16) uint8_t tmp[256]; /* a check hook reads it as its C type */
        uint8_t *buf = NULL; /* a copy of snap, made when a field needs converting */
        int view = VIEW_AT(rs, t), top = lua_gettop(L);
        if (info->field_count + 4 > LUA_MINSTACK) luaL_checkstack(L, info->field_count + 4, "too many fields");
        /* Convert every field first: a bad value raises before anything is written. */
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            lua_pushvalue(L, KEY_AT(rs, kq, t, f));
            lua_rawget(L, view);
            if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                int isnum = lua_type(L, -1) == LUA_TNUMBER; /* never a numeric string */
                lua_Number n = isnum ? lua_tonumber(L, -1) : 0;
                float was;
                memcpy(&was, snap + fd->offset, 4);
                if (isnum && klua_same_float(n, was)) continue; /* unchanged */
                if (!buf) {
                    buf = info->size <= sizeof tmp ? tmp : klua_scratch(L, kq->kw, info->size);
                    memcpy(buf, snap, info->size);
                }
                float v;
                const char *err = isnum ? klua_to_float(L, n, &v) : klua_to_field(L, -1, fd, buf);
                if (err) field_error(L, kq, t, fd, err);
                if (isnum) memcpy(buf + fd->offset, &v, 4);
                continue;
            }
            if (!buf) {
                buf = info->size <= sizeof tmp ? tmp : klua_scratch(L, kq->kw, info->size);
                memcpy(buf, snap, info->size);
            }
            if (fd->type == KILN_TYPE_CHAR && lua_type(L, -1) == LUA_TSTRING) {
                /* unchanged text keeps its bytes, even those past its NUL */
                size_t len;
                const char *str = lua_tolstring(L, -1, &len);
                size_t was = strnlen((const char *)snap + fd->offset, fd->count);
                if (len == was && memcmp(str, snap + fd->offset, len) == 0) continue;
            }
            const char *err = klua_to_field(L, -1, fd, buf);
            if (err) field_error(L, kq, t, fd, err);
            lua_settop(L, top + f + 1); /* the converted value stays, one slot per field */
        }
        lua_settop(L, top);
        if (!buf) continue; /* every field as it was filled */
        /* A component with a check hook (Parent) is asked before anything is written. */
        if (info->has_check && memcmp(buf, snap, info->size) != 0 &&
            kiln_component_check(kq->kw->world, kq->it.entities[kq->row], kq->terms[t], buf) != KILN_OK)
            klua_fail_world(L, kq->kw->world, "query:each");
        /* Then write the fields the script changed. */
        bool changed = false;
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            size_t n = kiln_type_size(fd->type) * fd->count;
            if (memcmp(buf + fd->offset, snap + fd->offset, n) != 0) {
                memcpy(dst + fd->offset, buf + fd->offset, n);
                changed = true;
            }
        }
        if (changed) kiln_iter_mark_changed(&kq->it, t, kq->row);
    }
}

/* Pushes the entity of the current row and its views; returns the number pushed. */
static int push_row(lua_State *L, klua_query *kq, const row_slots *rs) {
    if (kq->term_count + 8 > LUA_MINSTACK) luaL_checkstack(L, kq->term_count + 8, "too many terms");
    lua_pushinteger(L, (lua_Integer)kq->it.entities[kq->row]);
    for (int t = 0; t < kq->term_count; t++) {
        void *col = kq->it.columns[t];
        switch (kq->kind[t]) {
        case TERM_TAG:
            /* a with-term tag is always there; an optional one is asked for */
            if (t < kq->with_count) lua_pushboolean(L, 1);
            else if (kiln_has(kq->kw->world, kq->it.entities[kq->row], kq->terms[t])) lua_pushboolean(L, 1);
            else lua_pushnil(L);
            break;
        case TERM_LUA:
            if (!col) lua_pushnil(L);
            else klua_value_push(L, kq->kw, ((const int32_t *)col)[kq->row]);
            break;
        default: {
            if (!col) {
                lua_pushnil(L); /* an optional term this archetype lacks */
                break;
            }
            const kiln_component_info *info = &kq->info[t];
            const uint8_t *src = (const uint8_t *)col + (size_t)kq->row * info->stride;
            memcpy(kq->snap[t], src, info->size);
            src = kq->snap[t]; /* the query's own copy: fills run no risk from the collector */
            int view = VIEW_AT(rs, t);
            for (int32_t f = 0; f < info->field_count; f++) {
                const kiln_field *fd = &info->fields[f];
                if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                    /* the key is there except on a loop's first row, where the view's own
                     * __newindex (view_missing) stores it: no script code runs */
                    float v;
                    memcpy(&v, src + fd->offset, 4);
                    lua_pushnumber(L, v);
                    lua_setfield(L, view, fd->name);
                    continue;
                }
                lua_pushvalue(L, KEY_AT(rs, kq, t, f));
                klua_push_field(L, fd, src);
                lua_rawset(L, view);
            }
            lua_pushvalue(L, kq->writable[t] ? view : PROXY_AT(rs, t));
            break;
        }
        }
    }
    return 1 + kq->term_count;
}

/* Moves to the next row; false (iteration finished) when there is none. */
static bool advance(lua_State *L, klua_query *kq, int q_idx) {
    kq->row++;
    while (kq->row >= kq->it.count) {
        if (!kiln_query_next(&kq->it)) {
            kq->active = true; /* finish() expects it */
            klua_query_finish(L, kq, q_idx);
            return false;
        }
        kq->row = 0;
    }
    return true;
}

/* The generic-for step (upvalues: EACH_UPV_*, then the row's slots when kq->upv_rows). */
static int each_step(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(EACH_UPV_QUERY));
    if (!kq->active || kq->kw->closed) return 0;
    if (kq->owner != kq->kw->current) /* resumed from a coroutine by another system */
        klua_fail(L, "query:each", "this loop belongs to %s%s%s; it cannot go on here",
                  kq->owner ? "system '" : "code outside systems", kq->owner ? kq->owner->name : "",
                  kq->owner ? "'" : "");
    row_slots rs;
    if (kq->upv_rows) upvalue_row_slots(kq, &rs);
    else push_row_slots(L, kq, lua_upvalueindex(EACH_UPV_QUERY), &rs); /* below the results */
    if (kq->row >= 0) write_back(L, kq, &rs);
    if (!advance(L, kq, lua_upvalueindex(EACH_UPV_QUERY))) return 0;
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
    klua_query_begin(L, kq, 1, "query:each");
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_EACH);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_GUARD); /* closes the iteration on break or error */
    return 4;
}

static int guard_close(lua_State *L) {
    klua_query **guard = luaL_checkudata(L, 1, KLUA_GUARD);
    klua_query *kq = *guard;
    if (kq && kq->active && !kq->kw->closed) {
        lua_getiuservalue(L, 1, KLUA_GUARD_UV_QUERY);
        int q_idx = lua_gettop(L);
        /* Left by break or return (no error): the current row's writes still land. A
         * conversion error here ends the iteration first, then propagates. */
        if (lua_isnoneornil(L, 2) && kq->row >= 0) {
            lua_pushcfunction(L, guarded_write_back);
            lua_pushlightuserdata(L, kq);
            lua_pushvalue(L, q_idx);
            if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
                klua_query_finish(L, kq, q_idx);
                return lua_error(L);
            }
        }
        klua_query_finish(L, kq, q_idx);
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
    row_slots rs;
    push_row_slots(L, kq, q_idx, &rs);
    bool rows_begun = false;
    while (advance(L, kq, q_idx)) {
        lua_pushvalue(L, fn_idx);
        int n = push_row(L, kq, &rs);
        if (extra_idx) lua_pushvalue(L, extra_idx);
        if (!rows_begun) { /* after the first push, which stores the views' keys through their
                            * own metamethods (calls the row mode would take for fn's) */
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
    lua_pushinteger(L, (lua_Integer)kiln_query_count(kq->query));
    return 1;
}

static int q_gc(lua_State *L) {
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    if (kq->query && !kq->kw->closed) {
        if (kq->active) klua_query_finish(L, kq, 1);
        kiln_query_destroy(kq->query);
        kq->kw->query_count--;
    }
    kq->query = NULL;
    return 0;
}

static int q_tostring(lua_State *L) {
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    if (!kq->query || kq->kw->closed) {
        lua_pushstring(L, "kiln.Query (closed)");
        return 1;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "kiln.Query {");
    for (int t = 0; t < kq->term_count; t++) {
        if (t) luaL_addstring(&b, ", ");
        luaL_addstring(&b, kq->info[t].name);
    }
    lua_pushfstring(L, "} (%I entities)", (lua_Integer)kiln_query_count(kq->query));
    luaL_addvalue(&b);
    luaL_pushresult(&b);
    return 1;
}

/* q:terms() -> list of term names, for tools. */
static int q_terms(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        lua_pushstring(L, kq->info[t].name);
        lua_rawseti(L, -2, t + 1);
    }
    return 1;
}

static const luaL_Reg query_methods[] = {
    {"each", q_each},
    {"count", q_count},
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
