/* bulk.c: q:bulk, the column-array path over a query: per chunk, fn gets a table of field
 * arrays per term; writable arrays are checked, then written back where fn changed them.
 * Invariant: nothing is written back unless every array of the chunk converted. */
#include <string.h>

#include "klua.h"

/* Keys of the bulk table (KLUA_QUERY_UV_BULK): arrays by (term, field), the snapshot block. */
#define BULK_KEY(t, f) ((lua_Integer)((t) + 1) * 1024 + (f))
#define BULK_TERM_TABLE 1023 /* f of the table handed to fn for term t */
#define BULK_SNAPSHOT (-1)

/* Pushes the reusable table under key of the bulk table at bulk_idx, creating it. */
static void bulk_table(lua_State *L, int bulk_idx, lua_Integer key) {
    if (lua_rawgeti(L, bulk_idx, key) == LUA_TNIL) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawseti(L, bulk_idx, key);
    }
}

static bool bulk_writes(const klua_query *kq, int t) {
    return kq->kind[t] == TERM_DATA && kq->writable[t] && kq->it.columns[t];
}

/* Phase 1: pushes fn's arguments for the current chunk after fn: n, the entities, then per
 * term a table of field arrays (term.x[i]), true/false for tags and absent optional terms. */
static void bulk_fill(lua_State *L, klua_query *kq, int bulk_idx) {
    int32_t n = kq->it.count;
    lua_pushinteger(L, n);
    bulk_table(L, bulk_idx, BULK_KEY(-1, 0));
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
        bulk_table(L, bulk_idx, BULK_KEY(t, BULK_TERM_TABLE));
        const uint8_t *base = kq->it.columns[t];
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            bulk_table(L, bulk_idx, BULK_KEY(t, f));
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
}

/* Phase 2: copies the writable columns of the chunk into the query's own snapshot block
 * (fn may use the world's scratch), so only what fn changed is written back and a
 * world:set inside fn stays. Returns the block. */
static uint8_t *bulk_snapshot(lua_State *L, klua_query *kq, int bulk_idx) {
    size_t bytes = 0;
    for (int t = 0; t < kq->term_count; t++)
        if (bulk_writes(kq, t)) bytes += (size_t)kq->it.count * kq->info[t].stride;
    uint8_t *snap;
    if (lua_rawgeti(L, bulk_idx, BULK_SNAPSHOT) == LUA_TUSERDATA && lua_rawlen(L, -1) >= bytes) {
        snap = lua_touserdata(L, -1);
    } else {
        snap = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
        lua_rawseti(L, bulk_idx, BULK_SNAPSHOT);
    }
    lua_pop(L, 1);
    size_t off = 0;
    for (int t = 0; t < kq->term_count; t++)
        if (bulk_writes(kq, t)) {
            memcpy(snap + off, kq->it.columns[t], (size_t)kq->it.count * kq->info[t].stride);
            off += (size_t)kq->it.count * kq->info[t].stride;
        }
    return snap;
}

/* Raises unless every key of a writable term table is one of the component's fields: a
 * misspelt term.vx = {...} must not pass silently. */
static void bulk_check_terms(lua_State *L, klua_query *kq, int bulk_idx) {
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t)) continue;
        bulk_table(L, bulk_idx, BULK_KEY(t, BULK_TERM_TABLE));
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pop(L, 1);
            if (lua_type(L, -1) != LUA_TSTRING || !klua_find_field(&kq->info[t], lua_tostring(L, -1))) {
                const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
                klua_fail(L, "query:bulk", "%s has no field '%s'", kq->info[t].name,
                          klua_quote(L, key, strlen(key)));
            }
        }
        lua_pop(L, 1);
    }
}

/* Converts row r of field fd from the array at the top into tmp (a copy of the row's
 * snapshot was); returns NULL or a pushed message. Unchanged text keeps its bytes. */
static const char *bulk_convert(lua_State *L, const kiln_field *fd, int32_t r, const uint8_t *was,
                                uint8_t *tmp) {
    lua_rawgeti(L, -1, r + 1);
    const char *err = NULL;
    if (fd->type == KILN_TYPE_FLOAT && fd->count == 1 && lua_type(L, -1) == LUA_TNUMBER) {
        float v;
        err = klua_to_float(L, lua_tonumber(L, -1), &v);
        if (!err) memcpy(tmp + fd->offset, &v, 4);
    } else if (fd->type == KILN_TYPE_CHAR && lua_type(L, -1) == LUA_TSTRING) {
        size_t len;
        const char *str = lua_tolstring(L, -1, &len);
        size_t old = strnlen((const char *)was + fd->offset, fd->count);
        if (len != old || memcmp(str, was + fd->offset, len) != 0) err = klua_to_field(L, -1, fd, tmp);
    } else {
        err = klua_to_field(L, -1, fd, tmp);
    }
    if (!err) lua_pop(L, 1);
    return err;
}

/* Asks the check hook of each checked writable term (Parent) about every row fn changed,
 * before anything is written: the row as it would be after the write-back. */
static void bulk_check_rows(lua_State *L, klua_query *kq, int bulk_idx, const uint8_t *snap) {
    size_t snap_off = 0;
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t)) continue;
        const kiln_component_info *info = &kq->info[t];
        const uint8_t *tsnap = snap + snap_off;
        snap_off += (size_t)kq->it.count * info->stride;
        if (!info->has_check) continue;
        for (int32_t r = 0; r < kq->it.count; r++) {
            const uint8_t *was = tsnap + (size_t)r * info->stride;
            uint8_t row[256];
            memcpy(row, was, info->size);
            for (int32_t f = 0; f < info->field_count; f++) {
                bulk_table(L, bulk_idx, BULK_KEY(t, f));
                if (bulk_convert(L, &info->fields[f], r, was, row)) return; /* raised by the caller */
                lua_pop(L, 1);
            }
            if (memcmp(row, was, info->size) != 0 &&
                kiln_component_check(kq->kw->world, kq->it.entities[r], kq->terms[t], row) != KILN_OK)
                klua_fail_world(L, kq->kw->world, "query:bulk");
        }
    }
}

/* Phase 3: converts every writable array (pass 0: a bad value raises before anything is
 * written), asks the check hooks, then writes and marks the fields fn changed (pass 1). */
static void bulk_write_back(lua_State *L, klua_query *kq, int bulk_idx, const uint8_t *snap) {
    char eb[24];
    int32_t n = kq->it.count;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) bulk_check_rows(L, kq, bulk_idx, snap);
        size_t snap_off = 0;
        for (int t = 0; t < kq->term_count; t++) {
            if (!bulk_writes(kq, t)) continue;
            const kiln_component_info *info = &kq->info[t];
            uint8_t *base = kq->it.columns[t];
            const uint8_t *tsnap = snap + snap_off;
            snap_off += (size_t)n * info->stride;
            for (int32_t f = 0; f < info->field_count; f++) {
                const kiln_field *fd = &info->fields[f];
                size_t fbytes = kiln_type_size(fd->type) * fd->count;
                bulk_table(L, bulk_idx, BULK_KEY(t, f));
                for (int32_t r = 0; r < n; r++) {
                    const uint8_t *was = tsnap + (size_t)r * info->stride;
                    uint8_t tmp[256];
                    memcpy(tmp, was, info->size);
                    const char *err = bulk_convert(L, fd, r, was, tmp);
                    if (err)
                        klua_fail(L, "query:bulk", "%s.%s[%d] (entity %s): %s", info->name, fd->name,
                                  (int)r + 1, klua_entity_str(kq->it.entities[r], eb), err);
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

/* q:bulk(fn, ...): for each chunk, fn(n, entities, term1, term2, ..., ...) where each term
 * is a table of field arrays (term.x[i]); writable arrays are written back afterwards.
 * Runs under q_bulk's pcall: arguments are the query, fn, then the extra values. */
static int bulk_body(lua_State *L) {
    klua_query *kq = lua_touserdata(L, 1);
    int nextra = lua_gettop(L) - 2;
    luaL_checkstack(L, nextra + kq->term_count + 16, "too many arguments");
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_BULK);
    int bulk_idx = lua_gettop(L);
    while (kiln_query_next(&kq->it)) {
        lua_pushvalue(L, 2);
        bulk_fill(L, kq, bulk_idx);
        for (int i = 0; i < nextra; i++) lua_pushvalue(L, 3 + i);
        const uint8_t *snap = bulk_snapshot(L, kq, bulk_idx);
        lua_call(L, 2 + kq->term_count + nextra, 0); /* errors reach q_bulk's pcall */
        bulk_check_terms(L, kq, bulk_idx);
        bulk_write_back(L, kq, bulk_idx, snap);
    }
    kq->active = false; /* kiln_query_next finished the iteration */
    return 0;
}

static int q_bulk(lua_State *L) {
    const char *fname = "query:bulk";
    klua_query *kq = klua_query_check(L, 1);
    if (!lua_isfunction(L, 2)) klua_typeerror(L, 2, fname, "function");
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] == TERM_LUA) klua_fail(L, fname, "%s holds Lua values; use each", kq->info[t].name);
        if (kq->kind[t] == TERM_DATA && kq->info[t].size > 256)
            klua_fail(L, fname, "%s is too large for the bulk path (over 256 bytes); use each", kq->info[t].name);
    }
    klua_query_begin(L, kq, 1, fname);
    lua_pushvalue(L, 1);
    lua_insert(L, 1); /* a copy of the query stays below the call */
    lua_pushcfunction(L, bulk_body);
    lua_insert(L, 2);
    if (lua_pcall(L, lua_gettop(L) - 2, 0, 0) != LUA_OK) {
        /* End the iteration (landing deferred changes) before passing the error on. */
        klua_query_finish(L, kq, 1);
        return lua_error(L);
    }
    return 0;
}

static const luaL_Reg bulk_methods[] = {
    {"bulk", q_bulk},
    {NULL, NULL},
};

void klua_open_bulk(lua_State *L) { klua_addmethods(L, KLUA_QUERY, bulk_methods); }
