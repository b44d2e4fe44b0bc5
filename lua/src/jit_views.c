/* jit_views.c: the C half of the FFI views under LuaJIT (q:each, each-systems, q:each_ffi,
 * q:bulk_ffi): the terms as FFI declarations, chunks put in a row state (ffi.lua runs rows). */
#include <stddef.h>
#include <string.h>

#include "klua.h"

#if KLUA_LUAJIT

/* The FFI declaration of one element of type t, or NULL when it has none. */
static const char *ffi_type(kiln_type t) {
    switch (t) {
    case KILN_TYPE_BOOL: return "bool";
    case KILN_TYPE_INT8: return "int8_t";
    case KILN_TYPE_INT16: return "int16_t";
    case KILN_TYPE_INT32: return "int32_t";
    case KILN_TYPE_INT64: return "int64_t";
    case KILN_TYPE_UINT8: return "uint8_t";
    case KILN_TYPE_UINT16: return "uint16_t";
    case KILN_TYPE_UINT32: return "uint32_t";
    case KILN_TYPE_UINT64: return "uint64_t";
    case KILN_TYPE_FLOAT: return "float";
    case KILN_TYPE_DOUBLE: return "double";
    case KILN_TYPE_ENTITY: return "uint64_t";
    case KILN_TYPE_CHAR: return "char";
    case KILN_TYPE_VEC2: return "struct { float x, y; }";
    case KILN_TYPE_VEC3: return "struct { float x, y, z; }";
    case KILN_TYPE_VEC4:
    case KILN_TYPE_QUAT: return "struct { float x, y, z, w; }";
    case KILN_TYPE_MAT4: return "float[16]";
    default: return NULL;
    }
}

static void end_rows(lua_State *L, int q_idx);

/* One field as ffi.lua declares it (ffi.lua checks offsets and sizes against ffi.offsetof). */
/* fd is the world's: the name is copied into Lua first, then no more of it is read than the
 * copy taken before (a finalizer run by what is made may close the world). The caller checks
 * the world is open before passing the next field. */
void klua_jit_push_field(lua_State *L, const kiln_field *field) {
    kiln_field copy = *field;
    const kiln_field *fd = &copy;
    lua_pushstring(L, fd->name);
    lua_createtable(L, 0, 6);
    lua_insert(L, -2);
    lua_setfield(L, -2, "name");
    const char *decl = ffi_type(fd->type);
    if (decl) lua_pushstring(L, decl);
    else lua_pushnil(L);
    lua_setfield(L, -2, "ctype");
    lua_pushstring(L, kiln_type_name(fd->type));
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, fd->count);
    lua_setfield(L, -2, "count");
    lua_pushinteger(L, fd->offset);
    lua_setfield(L, -2, "offset");
    lua_pushinteger(L, (lua_Integer)kiln_type_size(fd->type));
    lua_setfield(L, -2, "elem_size");
}

/* views.terms(q): per term {kind = "data"|"tag"|"lua", name, optional, size, stride,
 * check (a check hook validates its writes), fields = {{name, ctype, type, count, offset,
 * elem_size}...}}. */
static int views_terms(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    lua_createtable(L, kq->term_count, 0);
    for (int t = 0; t < kq->term_count; t++) {
        const kiln_component_info *info = &kq->info[t];
        lua_createtable(L, 0, 8);
        static const char *const kinds[] = {"data", "tag", "lua"};
        lua_pushstring(L, kinds[kq->kind[t]]);
        lua_setfield(L, -2, "kind");
        klua_query_check(L, 1); /* what was made may have run a finalizer that closed the world */
        lua_pushstring(L, info->name);
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, t >= kq->with_count);
        lua_setfield(L, -2, "optional");
        lua_pushinteger(L, (lua_Integer)info->size);
        lua_setfield(L, -2, "size");
        lua_pushinteger(L, (lua_Integer)info->stride);
        lua_setfield(L, -2, "stride");
        lua_pushboolean(L, info->has_check);
        lua_setfield(L, -2, "check");
        lua_createtable(L, info->field_count, 0);
        for (int32_t f = 0; f < info->field_count; f++) {
            klua_query_check(L, 1);
            klua_jit_push_field(L, &info->fields[f]);
            lua_rawseti(L, -2, f + 1);
        }
        lua_setfield(L, -2, "fields");
        lua_rawseti(L, -2, t + 1);
    }
    return 1;
}

/* The row state of a q:each FFI loop, which ffi.lua's step reads and advances as a struct
 * (its declaration is checked against views.layout): the row i of n, the tick to stamp (as
 * rows store it: a kiln_row_tick, see kiln.h),
 * and the chunk's entities, columns (NULL: a tag, or an optional term the chunk lacks) and
 * the ticks of the terms the loop stamps (NULL: a term it must not mark). */
typedef struct ffi_rows {
    int64_t i;
    int32_t n;
    uint32_t tick;
    const kiln_entity *entities;
    void *columns[KILN_QUERY_MAX_TERMS * 2];
    kiln_row_tick *ticks[KILN_QUERY_MAX_TERMS * 2];
} ffi_rows;

/* The row state at idx, or NULL: a userdata of the state's exact size (views.rows made it),
 * since ffi.lua's state of the query, where it is kept, is in reach of the debug library. */
static ffi_rows *rows_at(lua_State *L, int idx) {
    return lua_type(L, idx) == LUA_TUSERDATA && lua_rawlen(L, idx) == sizeof(ffi_rows) ? lua_touserdata(L, idx) : NULL;
}

static int32_t next_chunk(lua_State *L, klua_query *kq, ffi_rows *rows, bool stamp);

/* Whether FFI views may run over kw now: not in a mod's world, nor under an instruction
 * budget, the world's or one armed on the state for any world (the table path's rows are
 * what budgets count). */
static bool views_may_run(lua_State *L, const klua_world *kw) {
    return !kw->mod && kw->budget_limit == 0 && kw->instructions == 0 && klua_budget_left(L) < 0;
}

/* Raises klua_query_check's error for the Query at 1 (its world closed). */
static int check_query(lua_State *L) {
    klua_query_check(L, 1);
    return 0;
}

/* views.begin(q, state, writable[, level[, fname[, rows[, stamp[, site]]]]]): starts the FFI
 * loop of ffi.lua's query state state (nil: q:bulk_ffi's, which runs inside one call), kept
 * as the query's running loop (end_rows empties it when the loop ends), in the frame level
 * levels up (errors name fname, default query:each_ffi). Returns false (nothing begun) where
 * the table path must run instead: a mod's world (sandboxed) or an armed instruction
 * budget. Else returns the loop's number here (never 0: views.alive's; the generic for's
 * state is ffi.lua's own number of the loop) and the running system's name
 * (or nil), (and with a row state, views.rows, the first chunk's row count, 0 for none, the
 * chunk in rows, its rows stamped now with stamp; and with site, the function of that frame,
 * its current line and how many slots above that frame's the frame it called lies (LuaJIT's
 * i_ci >> 16: the slot of the call, plus the frame link), or nil for a C frame), and sets
 * writable[t] to whether term t is writable (a table the caller keeps: no garbage). */
static int views_begin(lua_State *L) {
    /* the loop runs in the frame level levels above (default 2: the caller of ffi.lua's
     * method that called this), whose line a closed world's query names, not ffi.lua's */
    int level = (int)luaL_optinteger(L, 4, 2);
    klua_query *kq = luaL_testudata(L, 1, KLUA_QUERY);
    if (!kq) kq = klua_query_check(L, 1); /* raises */
    if (!kq->query || kq->kw->closed) { /* klua_query_check's message, at the script's line */
        lua_pushvalue(L, 1);
        if (klua_pcall_c(L, check_query, 1, 0, 0) == LUA_OK) lua_pushliteral(L, "attempt to use a query of a closed world");
        luaL_where(L, level);
        lua_insert(L, -2);
        lua_concat(L, 2);
        return lua_error(L);
    }
    if (!lua_isnil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    klua_world *kw = kq->kw;
    if (!views_may_run(L, kw)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (kq->active) klua_jit_settle_query(L, kq, 1); /* a loop left by break */
    klua_query_begin(L, kq, 1, luaL_optstring(L, 5, "query:each_ffi"));
    kq->ffi_loop = true;
    kq->ffi_end_rows = end_rows;
    /* 0: no loop (views.alive); 2^53 loops take decades, so a kept debug view's number never
     * comes round to name a later loop */
    if (++kq->ffi_gen >= (uint64_t)1 << 53) kq->ffi_gen = 1;
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, 1, KLUA_QUERY_UV_FFI);
    lua_Debug ar;
    bool framed = !lua_isnil(L, 2) && lua_getstack(L, level, &ar);
    kq->jit_height = framed ? (ar.i_ci & 0xffff) : -1;
    kq->jit_local = 0;
    /* q:bulk_ffi: the loop runs while ffi.lua's method that began it (level 1) runs, whose
     * Lua code ends it; a stop that raises at every instruction (a spent budget, a console
     * statement's time limit) leaves the method without ending it, and the loop, left as by
     * break, is closed when its query or world is used next (jit_methods.c) */
    lua_Debug caller;
    if (lua_isnil(L, 2) && lua_getstack(L, 1, &caller) && lua_getinfo(L, "S", &caller) && caller.linedefined > 0) {
        kq->jit_height = caller.i_ci & 0xffff;
        kq->jit_local = -caller.linedefined;
    }
    for (int t = 0; t < kq->term_count; t++) {
        lua_pushboolean(L, kq->writable[t]);
        lua_rawseti(L, 3, t + 1);
    }
    lua_pushinteger(L, (lua_Integer)kq->ffi_gen);
    if (kw->current) lua_pushstring(L, kw->current->name);
    else lua_pushnil(L);
    /* q:each: its first chunk now, so a loop calls C only here and at each chunk's end */
    ffi_rows *rows = rows_at(L, 6);
    if (!rows) return 2;
    lua_pushinteger(L, next_chunk(L, kq, rows, lua_toboolean(L, 7)));
    if (!lua_toboolean(L, 8)) return 3;
    /* where the loop is written: ffi.lua reads its bytecode once per site (loop_sites.lua) */
    if (framed && lua_getinfo(L, "fl", &ar)) {
        if (lua_isfunction(L, -1) && !lua_iscfunction(L, -1)) {
            lua_pushinteger(L, ar.currentline);
            lua_pushinteger(L, ar.i_ci >> 16); /* the called frame's distance: the call's slot */
            return 6;
        }
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    return 4;
}

/* views.rows(): a new row state (a userdata, kept by ffi.lua's state of the query) and its
 * address, which ffi.lua casts to the struct. */
static int views_rows(lua_State *L) {
    ffi_rows *r = lua_newuserdatauv(L, sizeof *r, 0);
    memset(r, 0, sizeof *r);
    lua_pushlightuserdata(L, r);
    return 2;
}

/* Moves the FFI loop of kq (at stack index 1) to its next chunk and returns its row count,
 * or 0 when the loop ended (then finished). The column tick of each writable term the chunk
 * has is marked. With stamp (q:bulk_ffi) every row of those terms is stamped changed now,
 * and ffi.lua reads the chunk's pointers from the iterator (views.iter); with rows (q:each,
 * each-systems) the chunk is put in it at row -1 (without stamp the step stamps each row it
 * reaches), and at the end it is emptied. */
static int32_t next_chunk(lua_State *L, klua_query *kq, ffi_rows *rows, bool stamp) {
    if (rows) memset(rows, 0, sizeof *rows); /* ended, unless a chunk comes */
    if (!kq->active || !kq->ffi_loop || kq->kw->closed) return 0;
    klua_query_check_owner(L, kq);
    if (!kiln_query_next(&kq->it)) {
        klua_query_end(L, kq, 1, stamp ? "query:bulk_ffi" : "query:each");
        return 0;
    }
    kiln_iter *it = &kq->it;
    /* the iteration's tick as rows store it now (kiln_iter_mark_changed's): ffi.lua keeps it
     * for the chunk, so a rebase while the loop is suspended makes its stamps read later */
    kiln_tick base = *it->tick_base;
    kiln_row_tick now = (kiln_row_tick)(it->mark_tick > base ? it->mark_tick - base : 0);
    if (rows) {
        rows->i = -1;
        rows->n = it->count;
        rows->tick = now; /* a kiln_row_tick */
        rows->entities = it->entities;
    }
    for (int t = 0; t < kq->term_count; t++) {
        bool data = kq->kind[t] == TERM_DATA;
        if (rows && data) rows->columns[t] = it->columns[t];
        if (!data || !kq->writable[t] || !it->columns[t] || !it->ticks[t]) continue;
        it->marked |= (uint64_t)1 << t; /* the rows' stamps reach the column's latest tick */
        if (kq->info[t].has_check) continue; /* a check hook's views are const */
        if (rows) rows->ticks[t] = it->ticks[t];
        if (stamp) kiln_iter_mark_rows(it, t, 0, it->count);
    }
    return it->count;
}

/* Whether the userdata at idx is the rows of the running FFI loop of the Query at 1 (those of
 * the state begin noted): the rows of another state of the query (q:each's and q:each_ffi's
 * are two) never take a chunk of its loop. */
static bool running_rows(lua_State *L, int idx) {
    bool mine = false;
    if (lua_getiuservalue(L, 1, KLUA_QUERY_UV_FFI) == LUA_TTABLE) {
        lua_pushliteral(L, "rows");
        lua_rawget(L, -2);
        mine = lua_rawequal(L, -1, idx);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return mine;
}

/* views.next(q[, stamp]) or views.next(q, rows[, stamp]): next_chunk, with rows a row state
 * (views.rows) of the running loop; returns the chunk's row count, or nothing when the loop
 * ended (or rows are not its). */
static int views_next(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    ffi_rows *rows = rows_at(L, 2);
    if (lua_type(L, 2) == LUA_TUSERDATA && (!rows || !running_rows(L, 2))) return 0;
    int32_t n = next_chunk(L, kq, rows, lua_toboolean(L, rows ? 3 : 2));
    if (n == 0) return 0;
    lua_pushinteger(L, n);
    return 1;
}

/* views.iter(q): the address of the query's iterator (it lives as long as the query), which
 * ffi.lua reads as the struct views.layout describes. */
static int views_iter(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    lua_pushlightuserdata(L, &kq->it);
    return 1;
}

/* views.finish(q): ends the FFI loop of q now (q:bulk_ffi, when its function raised). */
static int views_finish(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    if (kq->active && kq->ffi_loop) klua_query_finish(L, kq, 1);
    return 0;
}

/* views.alive(q, loop): whether the FFI loop numbered loop still runs (a loop left by break
 * is closed first; none runs on a closed world). Debug views ask it on every use. */
static int views_alive(lua_State *L) {
    klua_query *kq = luaL_checkudata(L, 1, KLUA_QUERY);
    lua_Integer loop = luaL_checkinteger(L, 2);
    if (!kq->query || kq->kw->closed) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (kq->active && kq->ffi_loop) klua_jit_settle_query(L, kq, 1);
    lua_pushboolean(L, kq->active && kq->ffi_loop && loop > 0 && kq->ffi_gen == (uint64_t)loop && !kq->kw->closed);
    return 1;
}

/* views.state(q[, s]): ffi.lua's states of the query (kept with it), or sets them. */
static int views_state(lua_State *L) {
    klua_query_check(L, 1);
    if (lua_gettop(L) >= 2) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_settop(L, 2);
        lua_setiuservalue(L, 1, KLUA_QUERY_UV_FFI_STATE);
        return 0;
    }
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_FFI_STATE);
    return 1;
}

/* Empties the state of the FFI loop of the Query at q_idx (klua_query_finish calls it through
 * kq->ffi_end_rows when the loop ends however it ends): its loop number 0, so its step, called
 * again with the loop's number, finds no more rows. */
static void end_rows(lua_State *L, int q_idx) {
    q_idx = lua_absindex(L, q_idx);
    if (lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_FFI) == LUA_TTABLE) { /* ffi.lua's query state */
        static const char *const keys[] = {"loop", "n"};
        for (int k = 0; k < 2; k++) {
            lua_pushstring(L, keys[k]);
            lua_pushinteger(L, 0);
            lua_rawset(L, -3); /* an existing key: nothing allocated */
        }
        lua_pushliteral(L, "rows");
        lua_rawget(L, -2);
        ffi_rows *rows = rows_at(L, -1);
        if (rows) memset(rows, 0, sizeof *rows);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* views.runner(fn): fn(q, fn, dt) runs the rows of a Lua each-system from now on, where the
 * world allows FFI views (klua_jit_push_each_runner). */
static int views_runner(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_EACH);
    return 0;
}

/* views.each_rows(q, fn, dt): the rows of a Lua each-system with table views, a C call per
 * row (what the runner falls back to when a term cannot be mapped to an FFI type). */
static int views_each_rows(lua_State *L) {
    klua_query *kq = klua_query_check(L, 1);
    klua_system *s = kq->kw->current;
    klua_query_each_call(L, 1, 2, 3, s ? s->each_cost : -1);
    return 0;
}

bool klua_jit_push_each_runner(lua_State *L, klua_world *kw) {
    /* a mod, or a budget: the table path, whose rows a budget can count */
    if (!views_may_run(L, kw)) return false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_EACH) == LUA_TFUNCTION) return true;
    lua_pop(L, 1);
    return false;
}

void klua_jit_push_running(lua_State *L, const klua_world *kw) {
    /* a mod's world runs no FFI views; and its state may be at its memory limit, where the
     * look-ups below could allocate and raise out of the schedule's run */
    if (kw->mod_hooks) {
        lua_pushnil(L);
        return;
    }
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_SHARED) == LUA_TTABLE) lua_getfield(L, -1, "running_system");
    else lua_pushnil(L);
    lua_remove(L, -2);
}

void klua_jit_restore_running(lua_State *L, const klua_world *kw, int idx) {
    idx = lua_absindex(L, idx);
    if (kw->mod_hooks) {
        lua_remove(L, idx);
        return;
    }
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_SHARED) == LUA_TTABLE) {
        lua_pushvalue(L, idx);
        lua_setfield(L, -2, "running_system");
    }
    lua_pop(L, 1);
    lua_remove(L, idx);
}

void klua_jit_open_views(lua_State *L, int layer_idx) {
    static const luaL_Reg fns[] = {
        {"terms", views_terms},   {"begin", views_begin}, {"next", views_next}, {"alive", views_alive},
        {"state", views_state},   {"finish", views_finish}, {"iter", views_iter}, {"rows", views_rows},
        {"runner", views_runner}, {"each_rows", views_each_rows}, {NULL, NULL}};
    layer_idx = lua_absindex(L, layer_idx);
    /* only where the host opened the ffi library: a mod's state has none (nor JIT), and
     * there q:each_ffi is q:each */
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "ffi");
    if (!lua_istable(L, -1)) { /* the module table an earlier load of kiln found */
        lua_pop(L, 1);
        lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_FFI);
        if (lua_istable(L, -1)) {
            lua_pushvalue(L, -1);
            lua_setfield(L, -3, "ffi");
        }
    }
    /* Not required yet: LuaJIT's openlibs leaves it preloadable. Opened once per state only:
     * LuaJIT's luaopen_ffi starts a new table of C types, which would leave every earlier
     * cdata (a reloaded kiln's views, say) typed by ids that now mean other types. */
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        lua_getfield(L, LUA_REGISTRYINDEX, "_PRELOAD");
        if (lua_istable(L, -1)) lua_getfield(L, -1, "ffi");
        else lua_pushnil(L);
        lua_remove(L, -2);
        if (!lua_isfunction(L, -1)) {
            lua_pop(L, 2);
            return;
        }
        lua_pushliteral(L, "ffi");
        lua_call(L, 1, 1);
        if (!lua_istable(L, -1)) {
            lua_pop(L, 2);
            return;
        }
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "ffi"); /* as require would */
    }
    lua_remove(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_FFI);
    lua_newtable(L);
    lua_insert(L, -2);
    lua_setfield(L, -2, "ffi");
    /* where ffi.lua finds the iterator's fields (it checks its declaration against them) */
    lua_createtable(L, 0, 14);
    static const struct { const char *name; size_t value; } layout[] = {
        {"count", offsetof(kiln_iter, count)},     {"entities", offsetof(kiln_iter, entities)},
        {"columns", offsetof(kiln_iter, columns)}, {"ticks", offsetof(kiln_iter, ticks)},
        {"tick", offsetof(kiln_iter, tick)},       {"max_terms", KILN_QUERY_MAX_TERMS * 2},
        {"tick_base", offsetof(kiln_iter, tick_base)},
        {"rows_i", offsetof(ffi_rows, i)},         {"rows_n", offsetof(ffi_rows, n)},
        {"rows_tick", offsetof(ffi_rows, tick)},   {"rows_entities", offsetof(ffi_rows, entities)},
        {"rows_columns", offsetof(ffi_rows, columns)}, {"rows_ticks", offsetof(ffi_rows, ticks)},
        {"rows_size", sizeof(ffi_rows)},
    };
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
        lua_pushinteger(L, (lua_Integer)layout[i].value);
        lua_setfield(L, -2, layout[i].name);
    }
    lua_setfield(L, -2, "layout");
    /* what every load of kiln in this state shares: its FFI types are declared once (a
     * second load would find the first one's names taken, or, where ffi.cdef is patched to
     * skip a repeated declaration as busted does, the first one's types and metatables) */
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_SHARED) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, KLUA_JIT_REG_SHARED);
    }
    lua_setfield(L, -2, "shared");
    for (const luaL_Reg *r = fns; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, -2, r->name);
    }
    lua_setfield(L, layer_idx, "views");
}

#endif
