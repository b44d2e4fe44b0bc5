/* query.c: the kiln.Query class: cached queries from Lua, row views for `for e, a, b in
 * q:each()`, and the column-array bulk path. Invariant: a query has at most one iteration
 * running; while it runs the world is deferred, and its views belong to the current row. */
#include <math.h>
#include <string.h>

#include "klua.h"

#define MAX_TERMS 32

enum { TERM_DATA, TERM_TAG, TERM_LUA };

typedef struct klua_query {
    klua_world *kw;
    kiln_query *query;
    int32_t term_count, with_count;
    kiln_component terms[MAX_TERMS];
    uint8_t kind[MAX_TERMS];
    bool writable[MAX_TERMS];
    kiln_component_info info[MAX_TERMS];
    uint8_t *snap[MAX_TERMS]; /* per data term: the row's bytes when its view was filled */
    kiln_iter it;
    bool active;
    int32_t row;
} klua_query;

/* uservalues: 1 world, 2 data tables (per term), 3 read-only proxies, 4 guard, 5 bulk arrays,
 * 6 snapshot blocks, 7 the each-iterator closure, 8 field-name keys (index t * 64 + f + 1) */
#define KEY(t, f) ((lua_Integer)(t) * KILN_MAX_FIELDS + (f) + 1)

static int each_step(lua_State *L);

static klua_query *check_query(lua_State *L, int idx) {
    klua_query *kq = luaL_checkudata(L, idx, KLUA_QUERY);
    if (!kq->query || kq->kw->closed) luaL_error(L, "attempt to use a query of a closed world");
    return kq;
}

/* Errors from view metamethods: upvalue 1 the query, 2 the term index. */
static int view_missing(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(1));
    int t = (int)lua_tointeger(L, lua_upvalueindex(2));
    if (!kq->active) return luaL_error(L, "a %s view was used after its loop ended", kq->info[t].name);
    if (lua_gettop(L) == 3 && lua_type(L, 2) == LUA_TSTRING &&
        klua_find_field(&kq->info[t], lua_tostring(L, 2))) {
        lua_rawset(L, 1); /* a field set to nil earlier in the row, set again */
        return 0;
    }
    return luaL_error(L, "%s has no field '%s'", kq->info[t].name,
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2));
}

static int view_readonly(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(1));
    int t = (int)lua_tointeger(L, lua_upvalueindex(2));
    if (!kq->active) return luaL_error(L, "a %s view was used after its loop ended", kq->info[t].name);
    const char *sys = klua_system_name(kq->kw);
    if (sys)
        return luaL_error(L, "system '%s' cannot write %s: it is read-only (declared only in reads)", sys, kq->info[t].name);
    return luaL_error(L, "%s is read-only here (declare it in writes to change it)", kq->info[t].name);
}

/* Reads a zero-terminated list of names at field key of the table at idx. */
static int read_terms(lua_State *L, klua_world *kw, int idx, const char *key, kiln_component *dest,
                      int max, const char *fname) {
    lua_pushstring(L, key);
    lua_rawget(L, idx); /* raw: a desc table's metamethods never run mid-call */
    int n = 0;
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1)) luaL_error(L, "%s: %s must be a list of component names", fname, key);
        int len = (int)lua_rawlen(L, -1);
        if (len > max) luaL_error(L, "%s: at most %d %s terms", fname, max, key);
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, -1, i);
            dest[n++] = klua_check_component(L, kw, -1, fname);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

int klua_world_query(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:query";
    luaL_checktype(L, 2, LUA_TTABLE);
    kiln_query_desc desc;
    memset(&desc, 0, sizeof desc);
    int with = (int)lua_rawlen(L, 2);
    if (with == 0) luaL_error(L, "%s: list at least one component, as in world:query{\"Position\"}", fname);
    if (with > KILN_QUERY_MAX_TERMS) luaL_error(L, "%s: at most %d terms", fname, KILN_QUERY_MAX_TERMS);
    for (int i = 1; i <= with; i++) {
        lua_rawgeti(L, 2, i);
        desc.with[i - 1] = klua_check_component(L, kw, -1, fname);
        lua_pop(L, 1);
    }
    int optional = read_terms(L, kw, 2, "optional", desc.optional, KILN_QUERY_MAX_TERMS, fname);
    read_terms(L, kw, 2, "without", desc.without, KILN_QUERY_MAX_TERMS, fname);

    klua_query *kq = lua_newuserdatauv(L, sizeof *kq, 8);
    memset(kq, 0, sizeof *kq);
    kq->kw = kw;
    kq->row = -1;
    luaL_setmetatable(L, KLUA_QUERY);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    kiln_query *q;
    if (kiln_query_create(kw->world, &desc, &q) != KILN_OK)
        luaL_error(L, "%s: %s", fname, kiln_world_error(kw->world));
    kq->query = q;
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
        lua_createtable(L, 0, 2);                        /* its metatable */
        lua_pushlightuserdata(L, kq);
        lua_pushinteger(L, t);
        lua_pushcclosure(L, view_missing, 2);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "__index");
        lua_setfield(L, -2, "__newindex");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, t + 1);                       /* data tables */
        lua_createtable(L, 0, 0);                        /* proxy */
        lua_createtable(L, 0, 2);
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "__index");
        lua_pushlightuserdata(L, kq);
        lua_pushinteger(L, t);
        lua_pushcclosure(L, view_readonly, 2);
        lua_setfield(L, -2, "__newindex");
        lua_setmetatable(L, -2);
        lua_rawseti(L, -3, t + 1);                       /* proxies */
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, -3, 3);
    lua_setiuservalue(L, -2, 2);
    luaL_newmetatable(L, KLUA_GUARD); /* exists: opened with the module */
    lua_pop(L, 1);
    klua_query **guard = lua_newuserdatauv(L, sizeof *guard, 1);
    *guard = kq;
    luaL_setmetatable(L, KLUA_GUARD);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1); /* the guard keeps its query alive */
    lua_setiuservalue(L, -2, 4);
    lua_newtable(L);
    lua_setiuservalue(L, -2, 5);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA) continue;
        kq->snap[t] = lua_newuserdatauv(L, kq->info[t].size, 0);
        lua_rawseti(L, -2, t + 1);
    }
    lua_setiuservalue(L, -2, 6);
    /* Interned field names, so filling a view never hashes a C string. */
    lua_createtable(L, 0, 0);
    for (int t = 0; t < kq->term_count; t++)
        for (int32_t f = 0; f < kq->info[t].field_count; f++) {
            lua_pushstring(L, kq->info[t].fields[f].name);
            lua_rawseti(L, -2, KEY(t, f));
        }
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, -3, 8);
    /* The iterator q:each() hands out: one closure per query, so loops make no garbage. */
    lua_pushvalue(L, -2);
    lua_getiuservalue(L, -3, 2);
    lua_getiuservalue(L, -4, 3);
    lua_rotate(L, -4, -1); /* query, data, proxies, keys */
    lua_pushcclosure(L, each_step, 4);
    lua_setiuservalue(L, -2, 7);
    return 1;
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

static void finish(lua_State *L, klua_query *kq, int q_idx) {
    if (!kq->active) return;
    kq->active = false;
    kq->row = -1;
    kiln_iter_fini(&kq->it);
    lua_getiuservalue(L, q_idx, 2);
    clear_views(L, kq, lua_gettop(L));
    lua_pop(L, 1);
}

KLUA_HIDDEN bool klua_system_writes(const klua_world *kw, kiln_component c);

static void begin(lua_State *L, klua_query *kq, const char *fname) {
    if (kq->active)
        luaL_error(L, "%s: this query is already being iterated (use a second query for a nested loop)", fname);
    for (int t = 0; t < kq->term_count; t++) {
        klua_check_access(L, kq->kw, kq->terms[t], false, fname);
        kq->writable[t] = kq->kw->current == NULL || klua_system_writes(kq->kw, kq->terms[t]);
    }
    kiln_query_iter(kq->query, &kq->it);
    kq->active = true;
    kq->row = -1;
}

/* Writes back the fields the script changed in the writable views of the current row:
 * each field is compared with what the view was filled with, so a field left alone never
 * overwrites a change made meanwhile (world:set on the same row), and marks nothing. */
static void write_back(lua_State *L, klua_query *kq, int data_idx, int keys_idx) {
    char eb[24];
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA || !kq->writable[t] || !kq->it.columns[t]) continue;
        const kiln_component_info *info = &kq->info[t];
        uint8_t *dst = (uint8_t *)kq->it.columns[t] + (size_t)kq->row * info->stride;
        const uint8_t *snap = kq->snap[t];
        uint8_t tmp[256];
        uint8_t *buf = info->size <= sizeof tmp ? tmp : klua_scratch(L, kq->kw, info->size);
        memcpy(buf, snap, info->size);
        /* Convert every field first: a bad value raises before anything is written. */
        lua_rawgeti(L, data_idx, t + 1);
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            lua_rawgeti(L, keys_idx, KEY(t, f));
            lua_rawget(L, -2);
            if (fd->type == KILN_TYPE_FLOAT && fd->count == 1 && lua_type(L, -1) == LUA_TNUMBER) {
                lua_Number n = lua_tonumber(L, -1);
                if (n == n && (n > 3.4028234663852886e38 || n < -3.4028234663852886e38) &&
                    n != (lua_Number)HUGE_VAL && n != -(lua_Number)HUGE_VAL)
                    luaL_error(L, "each: field '%s' of %s on entity %s: number %f is out of range for float",
                               fd->name, info->name, klua_entity_str(kq->it.entities[kq->row], eb), n);
                float v = (float)n;
                memcpy(buf + fd->offset, &v, 4);
            } else if (fd->type == KILN_TYPE_CHAR && lua_type(L, -1) == LUA_TSTRING) {
                /* unchanged text keeps its bytes, even those past its NUL */
                size_t len;
                const char *str = lua_tolstring(L, -1, &len);
                size_t was = strnlen((const char *)snap + fd->offset, fd->count);
                if (len != was || memcmp(str, snap + fd->offset, len) != 0) {
                    const char *err = klua_to_field(L, -1, fd, buf);
                    if (err)
                        luaL_error(L, "each: field '%s' of %s on entity %s: %s", fd->name, info->name,
                                   klua_entity_str(kq->it.entities[kq->row], eb), err);
                }
            } else {
                const char *err = klua_to_field(L, -1, fd, buf);
                if (err)
                    luaL_error(L, "each: field '%s' of %s on entity %s: %s", fd->name, info->name,
                               klua_entity_str(kq->it.entities[kq->row], eb), err);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
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
static int push_row(lua_State *L, klua_query *kq, int data_idx, int proxy_idx, int keys_idx) {
    luaL_checkstack(L, kq->term_count + 8, "each: too many terms");
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
            lua_rawgeti(L, data_idx, t + 1);
            for (int32_t f = 0; f < info->field_count; f++) {
                const kiln_field *fd = &info->fields[f];
                lua_rawgeti(L, keys_idx, KEY(t, f));
                if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                    float v;
                    memcpy(&v, src + fd->offset, 4);
                    lua_pushnumber(L, v);
                } else {
                    klua_push_field(L, fd, src);
                }
                lua_rawset(L, -3);
            }
            if (!kq->writable[t]) {
                lua_pop(L, 1);
                lua_rawgeti(L, proxy_idx, t + 1);
            }
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
            finish(L, kq, q_idx);
            return false;
        }
        kq->row = 0;
    }
    return true;
}

/* The generic-for step: upvalues 1 the query, 2 data tables, 3 proxies, 4 field keys. */
static int each_step(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(1));
    if (!kq->active || kq->kw->closed) return 0;
    if (kq->row >= 0) write_back(L, kq, lua_upvalueindex(2), lua_upvalueindex(4));
    lua_pushvalue(L, lua_upvalueindex(1));
    if (!advance(L, kq, lua_gettop(L))) return 0;
    lua_pop(L, 1);
    return push_row(L, kq, lua_upvalueindex(2), lua_upvalueindex(3), lua_upvalueindex(4));
}

static int guarded_write_back(lua_State *L) {
    klua_query *kq = lua_touserdata(L, 1);
    write_back(L, kq, 2, 3);
    return 0;
}

static int q_each(lua_State *L) {
    klua_query *kq = check_query(L, 1);
    begin(L, kq, "each");
    lua_getiuservalue(L, 1, 7);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_getiuservalue(L, 1, 4); /* closes the iteration on break or error */
    return 4;
}

static int guard_close(lua_State *L) {
    klua_query **guard = luaL_checkudata(L, 1, KLUA_GUARD);
    klua_query *kq = *guard;
    if (kq && kq->active && !kq->kw->closed) {
        lua_getiuservalue(L, 1, 1);
        int q_idx = lua_gettop(L);
        /* Left by break or return (no error): the current row's writes still land. A
         * conversion error here ends the iteration first, then propagates. */
        if (lua_isnoneornil(L, 2) && kq->row >= 0) {
            lua_pushcfunction(L, guarded_write_back);
            lua_pushvalue(L, q_idx);
            lua_getiuservalue(L, q_idx, 2);
            lua_getiuservalue(L, q_idx, 8);
            if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
                finish(L, kq, q_idx);
                return lua_error(L);
            }
        }
        finish(L, kq, q_idx);
    }
    return 0;
}

void klua_query_each_call(lua_State *L, int q_idx, int fn_idx, int extra_idx) {
    q_idx = lua_absindex(L, q_idx);
    fn_idx = lua_absindex(L, fn_idx);
    if (extra_idx) extra_idx = lua_absindex(L, extra_idx);
    klua_query *kq = check_query(L, q_idx);
    begin(L, kq, "each");
    lua_getiuservalue(L, q_idx, 2);
    lua_getiuservalue(L, q_idx, 3);
    lua_getiuservalue(L, q_idx, 8);
    int data_idx = lua_gettop(L) - 2, proxy_idx = lua_gettop(L) - 1, keys_idx = lua_gettop(L);
    luaL_checkstack(L, kq->term_count + 8, "each: too many terms");
    while (advance(L, kq, q_idx)) {
        lua_pushvalue(L, fn_idx);
        int n = push_row(L, kq, data_idx, proxy_idx, keys_idx);
        if (extra_idx) lua_pushvalue(L, extra_idx);
        lua_call(L, n + (extra_idx ? 1 : 0), 0); /* an error unwinds to the system runner */
        write_back(L, kq, data_idx, keys_idx);
    }
    lua_pop(L, 3);
}

/* Called by the system runner after an each-system, whether it raised or not. */
KLUA_HIDDEN void klua_query_abort(lua_State *L, int q_idx);
void klua_query_abort(lua_State *L, int q_idx) {
    klua_query *kq = luaL_checkudata(L, q_idx, KLUA_QUERY);
    finish(L, kq, lua_absindex(L, q_idx));
}

/* ---- bulk path ---------------------------------------------------------------------------- */

/* Pushes the reusable array table for (term, field) (or entities when term is -1). */
static void bulk_array(lua_State *L, int arrays_idx, int t, int f) {
    lua_Integer key = (lua_Integer)(t + 1) * 1024 + f;
    if (lua_rawgeti(L, arrays_idx, key) == LUA_TNIL) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawseti(L, arrays_idx, key);
    }
}

/* q:bulk(fn, ...): for each chunk, fn(n, entities, term1, term2, ..., ...) where each term
 * is a table of field arrays (term.x[i]); writable arrays are written back afterwards. */
static int bulk_body(lua_State *L) {
    klua_query *kq = lua_touserdata(L, 1);
    int nextra = lua_gettop(L) - 2;
    luaL_checkstack(L, nextra + kq->term_count + 16, "bulk: too many arguments");
    lua_getiuservalue(L, 1, 5);
    int arrays_idx = lua_gettop(L);
    char eb[24];
    while (kiln_query_next(&kq->it)) {
        int32_t n = kq->it.count;
        lua_pushvalue(L, 2);
        lua_pushinteger(L, n);
        bulk_array(L, arrays_idx, -1, 0);
        for (int32_t r = 0; r < n; r++) {
            lua_pushinteger(L, (lua_Integer)kq->it.entities[r]);
            lua_rawseti(L, -2, r + 1);
        }
        for (int t = 0; t < kq->term_count; t++) {
            const kiln_component_info *info = &kq->info[t];
            if (kq->kind[t] == TERM_TAG) {
                /* every row of a chunk shares its archetype: ask the first */
                lua_pushboolean(L, t < kq->with_count || kiln_has(kq->kw->world, kq->it.entities[0], kq->terms[t]));
                continue;
            }
            if (!kq->it.columns[t]) {
                lua_pushboolean(L, 0); /* an optional term this chunk lacks */
                continue;
            }
            bulk_array(L, arrays_idx, t, 1023); /* the term table */
            for (int32_t f = 0; f < info->field_count; f++) {
                const kiln_field *fd = &info->fields[f];
                bulk_array(L, arrays_idx, t, f);
                const uint8_t *base = kq->it.columns[t];
                if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                    for (int32_t r = 0; r < n; r++) {
                        float v;
                        memcpy(&v, base + (size_t)r * info->stride + fd->offset, 4);
                        lua_pushnumber(L, v);
                        lua_rawseti(L, -2, r + 1);
                    }
                } else {
                    for (int32_t r = 0; r < n; r++) {
                        klua_push_field(L, fd, base + (size_t)r * info->stride);
                        lua_rawseti(L, -2, r + 1);
                    }
                }
                lua_setfield(L, -2, fd->name);
            }
        }
        for (int i = 0; i < nextra; i++) lua_pushvalue(L, 3 + i);
        /* What the arrays were filled with, so only what fn changed is written back (a
         * world:set inside fn stays) and the checks compare against it. */
        size_t snap_bytes = 0;
        for (int t = 0; t < kq->term_count; t++)
            if (kq->kind[t] == TERM_DATA && kq->writable[t] && kq->it.columns[t])
                snap_bytes += (size_t)n * kq->info[t].stride;
        /* the query's own block: fn may use the world's scratch */
        uint8_t *snap = NULL;
        if (lua_rawgeti(L, arrays_idx, -1) == LUA_TUSERDATA && lua_rawlen(L, -1) >= snap_bytes) {
            snap = lua_touserdata(L, -1);
            lua_pop(L, 1);
        } else {
            lua_pop(L, 1);
            snap = lua_newuserdatauv(L, snap_bytes ? snap_bytes : 1, 0);
            lua_pushvalue(L, -1);
            lua_rawseti(L, arrays_idx, -1); /* key -1: keys from 0 up name arrays */
            lua_pop(L, 1);
        }
        size_t snap_off = 0;
        for (int t = 0; t < kq->term_count; t++)
            if (kq->kind[t] == TERM_DATA && kq->writable[t] && kq->it.columns[t]) {
                memcpy(snap + snap_off, kq->it.columns[t], (size_t)n * kq->info[t].stride);
                snap_off += (size_t)n * kq->info[t].stride;
            }
        lua_call(L, 2 + kq->term_count + nextra, 0); /* errors reach q_bulk's pcall */
        /* convert everything first (a bad value raises before any write), then write */
        snap_off = 0;
        for (int pass = 0; pass < 2; pass++) {
            snap_off = 0;
            for (int t = 0; t < kq->term_count; t++) {
                const kiln_component_info *info = &kq->info[t];
                if (kq->kind[t] != TERM_DATA || !kq->writable[t] || !kq->it.columns[t]) continue;
                uint8_t *base = kq->it.columns[t];
                const uint8_t *tsnap = snap + snap_off;
                snap_off += (size_t)n * info->stride;
                for (int32_t f = 0; f < info->field_count; f++) {
                    const kiln_field *fd = &info->fields[f];
                    size_t fbytes = kiln_type_size(fd->type) * fd->count;
                    bulk_array(L, arrays_idx, t, f);
                    for (int32_t r = 0; r < n; r++) {
                        const uint8_t *was = tsnap + (size_t)r * info->stride;
                        uint8_t tmp[256];
                        memcpy(tmp, was, info->size);
                        lua_rawgeti(L, -1, r + 1);
                        const char *err = NULL;
                        if (fd->type == KILN_TYPE_FLOAT && fd->count == 1 && lua_type(L, -1) == LUA_TNUMBER) {
                            float v = (float)lua_tonumber(L, -1); /* the bulk path stores as C casts */
                            memcpy(tmp + fd->offset, &v, 4);
                        } else if (fd->type == KILN_TYPE_CHAR && lua_type(L, -1) == LUA_TSTRING) {
                            size_t len;
                            const char *str = lua_tolstring(L, -1, &len);
                            size_t old = strnlen((const char *)was + fd->offset, fd->count);
                            if (len != old || memcmp(str, was + fd->offset, len) != 0)
                                err = klua_to_field(L, -1, fd, tmp);
                        } else {
                            err = klua_to_field(L, -1, fd, tmp);
                        }
                        if (err)
                            luaL_error(L, "bulk: %s.%s[%d] (entity %s): %s", info->name, fd->name,
                                       (int)r + 1, klua_entity_str(kq->it.entities[r], eb), err);
                        lua_pop(L, 1);
                        if (pass == 1 && memcmp(tmp + fd->offset, was + fd->offset, fbytes) != 0) {
                            memcpy(base + (size_t)r * info->stride + fd->offset, tmp + fd->offset, fbytes);
                            kiln_iter_mark_changed(&kq->it, t, r);
                        }
                    }
                    lua_pop(L, 1);
                }
            }
        }
    }
    kq->active = false; /* kiln_query_next finished the iteration */
    return 0;
}

static int q_bulk(lua_State *L) {
    klua_query *kq = check_query(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] == TERM_LUA)
            luaL_error(L, "bulk: %s holds Lua values; use each", kq->info[t].name);
        if (kq->kind[t] == TERM_DATA && kq->info[t].size > 256)
            luaL_error(L, "bulk: %s is too large for the bulk path (over 256 bytes); use each", kq->info[t].name);
    }
    begin(L, kq, "bulk");
    lua_pushvalue(L, 1);
    lua_insert(L, 1); /* a copy of the query stays below the call */
    lua_pushcfunction(L, bulk_body);
    lua_insert(L, 2);
    if (lua_pcall(L, lua_gettop(L) - 2, 0, 0) != LUA_OK) {
        /* End the iteration (landing deferred changes) before passing the error on. */
        finish(L, kq, 1);
        return lua_error(L);
    }
    return 0;
}

static int q_count(lua_State *L) {
    klua_query *kq = check_query(L, 1);
    lua_pushinteger(L, (lua_Integer)kiln_query_count(kq->query));
    return 1;
}

static int q_gc(lua_State *L) {
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    if (kq->query && !kq->kw->closed) {
        if (kq->active) finish(L, kq, 1);
        kiln_query_destroy(kq->query);
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
    klua_query *kq = check_query(L, 1);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        lua_pushstring(L, kq->info[t].name);
        lua_rawseti(L, -2, t + 1);
    }
    return 1;
}

static const luaL_Reg query_methods[] = {
    {"each", q_each},
    {"bulk", q_bulk},
    {"count", q_count},
    {"terms", q_terms},
    {NULL, NULL},
};

int klua_open_query(lua_State *L) {
    luaL_newmetatable(L, KLUA_QUERY);
    luaL_newlib(L, query_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, q_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, q_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_newmetatable(L, KLUA_GUARD);
    lua_pushcfunction(L, guard_close);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
    return 0;
}
