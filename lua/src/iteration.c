/* iteration.c: a Query's one running iteration: starting and ending it, moving row to row,
 * writing a row back, and the generated Lua step q:each() hands out. Invariant: a row is
 * written back only from values that all converted, compared with what its views were filled with. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "klua.h"

/* ---- The Lua step: one C call per row, the views set and read by VM instructions ----
 * A query whose views fit (lua_step_fits) hands out a Lua closure generated once per query:
 *     local step, D1, D2 = ...
 *     return function()
 *         local e, t1, t2, a1_1, a1_2, a2_1 = step(D1["x"], D1["y"], D2["x"])
 *         if e == nil then return nil end
 *         D1["x"] = a1_1 D1["y"] = a1_2 D2["x"] = a2_1
 *         return e, t1, t2
 *     end
 * step (lua_step_c) writes the previous row back from its arguments, exactly as write_back
 * would from the views, then returns the next row: what the loop gets per term and the
 * field values of the data terms. A VM field access costs a fraction of an API one, and the
 * results land in their registers with no API call. Between loops the closure's D<k> are an
 * inert empty table (KLUA_QUERY_UV_INERT), so a step called after its loop ended reads no
 * view (the views raise then); the first row of a loop puts the views in (swap_views).
 * An optional data term is read and set only when its last row had it (p<k>). */
enum { LSTEP_UPV_QUERY = 1, LSTEP_UPV_VIEWS }; /* then the data views, then the proxies */
#define LSTEP_MAX_UPVALUES 60 /* LuaJIT's limit, so the same code runs there */
#define LSTEP_MAX_VALUES 120  /* values step takes or returns */
#define STEPS_CACHED 256      /* compiled shapes kept per Lua state */

/* What a Query's user values turned out to hold when they are not what kiln put there. */
#define CHANGED "its state was changed through the debug library"

bool klua_query_uv(lua_State *L, int q_idx, int uv, const char *fname) {
    if (lua_getiuservalue(L, q_idx, uv) == LUA_TTABLE) return true;
    if (fname) klua_fail(L, fname, CHANGED);
    lua_pop(L, 1);
    return false;
}

bool klua_query_views(lua_State *L, const klua_query *kq, int tables_idx, const char *fname) {
    tables_idx = lua_absindex(L, tables_idx);
    for (int t = 0; t < kq->term_count; t++) {
        if (lua_rawgeti(L, tables_idx, t + 1) == LUA_TTABLE) continue;
        lua_pop(L, t + 1);
        if (fname) klua_fail(L, fname, CHANGED);
        return false;
    }
    return true;
}

/* Sets the Lua step's D<k> upvalues of the Query at q_idx to its data views (in) or to the
 * inert table. The views are checked (klua_query_uv): the step sets them by raw sets. Going
 * out (fname NULL: it must not raise), a changed state leaves the upvalues as they are. */
static void swap_views(lua_State *L, klua_query *kq, int q_idx, bool in, const char *fname) {
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_EACH); /* any function: lua_setupvalue checks */
    if (!klua_query_uv(L, q_idx, in ? KLUA_QUERY_UV_DATA : KLUA_QUERY_UV_INERT, fname)) {
        lua_pop(L, 1);
        return;
    }
    if (in) {
        klua_query_views(L, kq, -1, fname); /* checked, then dropped: read again below */
        lua_pop(L, kq->term_count);
        klua_query_uv(L, q_idx, KLUA_QUERY_UV_PROXIES, fname);
    }
    int fn = in ? -3 : -2;
    for (int t = 0; t < kq->term_count; t++) {
        if (!kq->lstep_upv[t]) continue;
        if (in) lua_rawgeti(L, -2, t + 1);
        else lua_pushvalue(L, -1);
        if (!lua_setupvalue(L, fn - 1, kq->lstep_upv[t])) lua_pop(L, 1);
        if (!in || !kq->lstep_vupv[t]) continue;
        lua_rawgeti(L, kq->writable[t] ? -2 : -1, t + 1); /* what the loop gets */
        if (!lua_setupvalue(L, fn - 1, kq->lstep_vupv[t])) lua_pop(L, 1);
    }
    lua_pop(L, in ? 3 : 2);
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
    if (klua_push_state(L, -1, KLUA_STATE_LOOPS)) {
        lua_pushvalue(L, q_idx);
        if (open) lua_pushthread(L);
        else lua_pushnil(L);
        lua_rawset(L, -3);
    }
    lua_pop(L, 2);
}

kiln_result klua_query_finish(lua_State *L, klua_query *kq, int q_idx) {
    if (!kq->active) return KILN_OK;
    if (kq->ffi_loop && kq->ffi_end_rows) kq->ffi_end_rows(L, q_idx); /* LuaJIT: its step finds no more rows */
    kq->active = false;
    kq->ffi_loop = false;
    kq->row = -1;
    kq->owner = NULL;
    kq->loop_L = NULL;
    kiln_result ended = kiln_iter_fini(&kq->it);
    if (kq->lstep) swap_views(L, kq, q_idx, false, NULL); /* a step called later reads no view */
    if (klua_query_uv(L, q_idx, KLUA_QUERY_UV_DATA, NULL)) { /* changed: no view to clear */
        if (klua_query_views(L, kq, -1, NULL)) {
            lua_pop(L, kq->term_count);
            clear_views(L, kq, lua_gettop(L));
        }
        lua_pop(L, 1);
    }
    track_loop(L, q_idx, false);
    return ended;
}

void klua_query_end(lua_State *L, klua_query *kq, int q_idx, const char *fname) {
    if (klua_query_finish(L, kq, q_idx) == KILN_OK) return;
    /* kiln_defer_end's contract: what did not land stays queued for the next outermost end */
    klua_fail(L, fname, "%s (the loop's changes that did not land stay queued)",
              klua_core_detail(kiln_world_error(kq->kw->world)));
}

bool klua_query_push_simple(lua_State *L, const klua_query *kq, int t) {
    const void *col = kq->it.columns[t];
    switch (kq->kind[t]) {
    case TERM_TAG: /* a with-term tag is always there; an optional one is asked for */
        if (t < kq->with_count || kiln_has(kq->kw->world, kq->it.entities[kq->row], kq->terms[t]))
            lua_pushboolean(L, 1);
        else lua_pushnil(L);
        return true;
    case TERM_LUA:
        if (!col) lua_pushnil(L);
        else klua_value_push(L, kq->kw, ((const int32_t *)col)[kq->row]);
        return true;
    default:
        return false;
    }
}

#if !KLUA_LUAJIT
/* Whether the guard of the Query at q_idx lies in any slot of any frame of L: a running loop's
 * generic for holds it (a "(for state)" local), and so do q:bulk and the each-call while they
 * run (a C temporary). */
static bool guard_on_stack(lua_State *L, int q_idx) {
    lua_getiuservalue(L, q_idx, KLUA_QUERY_UV_GUARD);
    const void *guard = lua_touserdata(L, -1);
    lua_pop(L, 1);
    lua_Debug ar;
    for (int level = 0; lua_getstack(L, level, &ar); level++)
        for (int i = 1; lua_getlocal(L, &ar, i) != NULL; i++) {
            bool found = lua_touserdata(L, -1) == guard;
            lua_pop(L, 1);
            if (found) return true;
        }
    return false;
}
#endif

/* Whether the running iteration of kq was left with no one to end it: under Lua 5.4, begun
 * outside systems on L, and its guard on no frame of L. That is a loop whose generic for never
 * took the guard (a hook raised between q:each's return and the loop's start: the guard is
 * closed only once the for holds it). Under LuaJIT a Query method closes a left loop before
 * it runs (jit_methods.c); a system's loops end with its run. */
static bool left_unguarded(lua_State *L, const klua_query *kq, int q_idx) {
#if KLUA_LUAJIT
    (void)L, (void)kq, (void)q_idx;
    return false;
#else
    return !kq->owner && kq->loop_L == L && !guard_on_stack(L, q_idx);
#endif
}

void klua_query_gone(lua_State *L, const klua_query *kq) {
    /* a query its own __gc released while its world lives on: a finalizer kept it (resurrected
     * it) past that __gc, or a host script called the __gc early (debug.getmetatable) */
    if (!kq->kw->closed)
        luaL_error(L, "attempt to use a query that was released (its finalizer ran; make a new one)");
    luaL_error(L, "attempt to use a query of a closed world");
    for (;;) {
    }
}

void klua_query_begin(lua_State *L, klua_query *kq, int q_idx, const char *fname) {
    q_idx = lua_absindex(L, q_idx);
    /* the loop walks every archetype the query matches, rows or none: before anything starts */
    if (kq->query && !kq->kw->closed) klua_budget_walk(L, kiln_query_archetype_count(kq->query), fname);
    if (kq->active && left_unguarded(L, kq, q_idx)) klua_query_finish(L, kq, q_idx);
    if (kq->active)
        klua_fail(L, fname, "this query is already being iterated (use a second query for a nested loop)");
    for (int t = 0; t < kq->term_count; t++) {
        klua_check_access(L, kq->kw, kq->terms[t], false, fname);
        kq->writable[t] = klua_system_writes(kq->kw, kq->terms[t]); /* (mods: not what is read-only to them) */
    }
    track_loop(L, q_idx, true); /* may raise (memory): before the iteration starts */
    /* what the caller made first (q:each's step) may have run a finalizer that closed the world */
    if (!kq->query || kq->kw->closed) klua_query_gone(L, kq);
    kiln_query_iter(kq->query, &kq->it);
    kq->active = true;
    kq->row = -1;
    kq->owner = kq->kw->current;
    kq->loop_L = L;
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

bool klua_query_runs_elsewhere(lua_State *L, const klua_query *kq) {
    return kq->loop_L && kq->loop_L != L && !thread_stuck(L, kq->loop_L);
}

void klua_query_close_loops(lua_State *L, klua_world *kw, klua_system *owner, bool stuck_only) {
    klua_push_self(L, kw);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    if (!klua_push_state(L, -1, KLUA_STATE_LOOPS)) {
        lua_pop(L, 2);
        return;
    }
    int loops = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, loops)) {
        klua_query *kq = luaL_testudata(L, -2, KLUA_QUERY);
        lua_State *co = lua_tothread(L, -1);
        lua_pop(L, 1);
        bool close = kq && kq->active &&
                     (stuck_only ? thread_stuck(L, co) || left_unguarded(L, kq, lua_gettop(L)) : kq->owner == owner);
        if (close) klua_query_finish(L, kq, lua_gettop(L)); /* sets an existing field to nil: the traversal goes on */
    }
    lua_pop(L, 2);
}

/* Raises for field fd of the current row (query:each naming field, component, entity). */
static void field_error(lua_State *L, klua_query *kq, int t, const kiln_field *fd, const char *err) {
    char eb[24];
    klua_fail(L, "query:each", "field '%s' of %s on entity %s: %s", fd->name, kq->info[t].name,
              klua_entity_str(kq->it.entities[kq->row], eb), err);
}

#if defined(__GNUC__)
#define STEP_INLINE static inline __attribute__((always_inline)) /* inlined: 65 instructions a row */
#define STEP_COLD __attribute__((cold, noinline))
#else
#define STEP_INLINE static inline
#define STEP_COLD
#endif

/* The write-back of float-only term t (packed: its fields at 4 * f, a struct of floats) of the
 * current row from the numbers at stack slots first ..: 1 when it wrote the fields that
 * changed (named in *mask, each field's old bytes saved first in kq->stage[t], the row's tick
 * in *tick), 0 when none changed, -1, with nothing of the term written, when a value is not a plain number
 * or is out of range (stage_term names what is wrong). A value still equal to the float it was
 * filled with costs one comparison. */
STEP_INLINE int write_floats(lua_State *L, klua_query *kq, int t, int first, kiln_row_tick *tick, uint64_t *mask,
                             bool packed) {
    const kiln_component_info *info = &kq->info[t];
    const uint8_t *snap = kq->snap[t];
    float vals[KILN_MAX_FIELDS];
    uint64_t changed = 0;
    for (int32_t f = 0; f < info->field_count; f++) {
        int idx = first + f;
        if (lua_type(L, idx) != LUA_TNUMBER) return -1; /* never a numeric string */
        lua_Number n = lua_tonumber(L, idx);
        float was;
        memcpy(&was, snap + (packed ? (size_t)f * 4 : info->fields[f].offset), 4);
        if (n == (lua_Number)was && n != 0) continue; /* as filled: one comparison */
        if (klua_same_float(n, was)) continue;        /* -0 and NaN as filled */
        if (isfinite(n) && fabs(n) > 3.4028234663852886e38) return -1;
        vals[f] = (float)n;
        if (memcmp(&vals[f], &was, 4) != 0) changed |= (uint64_t)1 << f; /* 0.1 for 0.1f: none */
    }
    if (!changed) return 0;
    uint8_t *dst = (uint8_t *)kq->it.columns[t] + (size_t)kq->row * info->stride, *old = kq->stage[t];
    *tick = kq->it.ticks[t][kq->row];
    *mask = changed;
    for (int32_t f = 0; changed; f++, changed >>= 1) {
        if (!(changed & 1)) continue;
        size_t off = packed ? (size_t)f * 4 : info->fields[f].offset;
        memcpy(old + off, dst + off, 4); /* for undo_floats */
        memcpy(dst + off, &vals[f], 4);
    }
    kiln_iter_mark_changed(&kq->it, t, kq->row);
    return 1;
}

/* Puts back the fields (masks) of the terms before term upto that write_floats wrote (written: a
 * bit per term) in the current row, their ticks (ticks) and the iteration's marked terms. */
static STEP_COLD void undo_floats(klua_query *kq, int upto, uint32_t written, const kiln_row_tick *ticks,
                                  const uint64_t *masks, uint64_t marked) {
    for (int t = 0; t < upto; t++) {
        if (!(written >> t & 1)) continue;
        uint8_t *dst = (uint8_t *)kq->it.columns[t] + (size_t)kq->row * kq->info[t].stride;
        for (int32_t f = 0; f < kq->info[t].field_count; f++) {
            size_t off = kq->info[t].fields[f].offset;
            if (masks[t] >> f & 1) memcpy(dst + off, kq->stage[t] + off, 4);
        }
        kq->it.ticks[t][kq->row] = ticks[t];
    }
    kq->it.marked = marked;
}

/* Stages term t of the current row from the values at stack slots first .. first +
 * field_count - 1 (one per field) into kq->stage[t]: each field is compared with what the row
 * held when its view was filled (kq->snap), so a field left alone never overwrites a change
 * made meanwhile (world:set on the same row). Returns whether a field changed; raises for a bad
 * value or a refusing check hook, with nothing written. */
static bool stage_term(lua_State *L, klua_query *kq, int t, int first) {
    const kiln_component_info *info = &kq->info[t];
    const uint8_t *snap = kq->snap[t];
    uint8_t *buf = kq->stage[t];
    bool staged = false; /* buf holds a copy of snap, made when a field needs converting */
    int top = lua_gettop(L);
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        int idx = first + f;
        if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
            int isnum = lua_type(L, idx) == LUA_TNUMBER; /* never a numeric string */
            lua_Number n = isnum ? lua_tonumber(L, idx) : 0;
            float was;
            memcpy(&was, snap + fd->offset, 4);
            if (isnum && klua_same_float(n, was)) continue; /* unchanged */
            if (!staged) memcpy(buf, snap, info->size), staged = true;
            float v;
            const char *err = isnum ? klua_to_float(L, n, &v) : klua_to_field(L, idx, fd, buf);
            if (err) field_error(L, kq, t, fd, err);
            if (isnum) memcpy(buf + fd->offset, &v, 4);
            continue;
        }
        if (!staged) memcpy(buf, snap, info->size), staged = true;
        if (fd->type == KILN_TYPE_CHAR && lua_type(L, idx) == LUA_TSTRING) {
            /* unchanged text keeps its bytes, even those past its NUL */
            size_t len;
            const char *str = lua_tolstring(L, idx, &len);
            size_t was = strnlen((const char *)snap + fd->offset, fd->count);
            if (len == was && memcmp(str, snap + fd->offset, len) == 0) continue;
        }
        const char *err = klua_restage_field(L, idx, fd, buf);
        if (err) field_error(L, kq, t, fd, err);
        lua_settop(L, top); /* what the conversion pushed */
    }
    if (!staged || memcmp(buf, snap, info->size) == 0) return false; /* every field as it was filled */
    /* A component with a check hook (Parent) is asked before anything is written. */
    if (info->has_check &&
        kiln_component_check(kq->kw->world, kq->it.entities[kq->row], kq->terms[t], buf) != KILN_OK)
        klua_fail_world(L, kq->kw->world, "query:each");
    return true;
}

/* Writes the fields of term t's stage that differ from its snapshot to the current row, and
 * marks it. Nothing here can raise. */
static void commit_term(klua_query *kq, int t) {
    const kiln_component_info *info = &kq->info[t];
    uint8_t *dst = (uint8_t *)kq->it.columns[t] + (size_t)kq->row * info->stride;
    const uint8_t *buf = kq->stage[t], *snap = kq->snap[t];
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        size_t n = kiln_type_size(fd->type) * fd->count;
        if (memcmp(buf + fd->offset, snap + fd->offset, n) != 0) memcpy(dst + fd->offset, buf + fd->offset, n);
    }
    kiln_iter_mark_changed(&kq->it, t, kq->row);
}

/* The terms of other fields are staged and checked first (stage_term may raise); then the
 * float-only ones are written at once (write_floats), and put back if a later one holds a bad
 * value, which stage_term then reports; only then are the staged terms written. Nothing
 * between the first float write and the last runs Lua code or makes an object. */
void klua_query_write_row(lua_State *L, klua_query *kq, const int *first) {
    uint32_t staged = 0, written = 0;
    for (int t = 0; t < kq->term_count; t++)
        if (first[t] && !kq->all_floats[t] && stage_term(L, kq, t, first[t])) staged |= (uint32_t)1 << t;
    uint64_t marked = kq->it.marked, masks[KLUA_MAX_TERMS];
    kiln_row_tick ticks[KLUA_MAX_TERMS];
    for (int t = 0; t < kq->term_count; t++) {
        if (!first[t] || !kq->all_floats[t]) continue;
        int done = write_floats(L, kq, t, first[t], &ticks[t], &masks[t], false);
        if (done >= 0) {
            written |= (uint32_t)done << t;
            continue;
        }
        undo_floats(kq, t, written, ticks, masks, marked);
        /* stage_term raises for term t's bad value; were it to pass, every float-only term
         * is staged from here on, so the row still lands whole */
        for (int u = 0; u < kq->term_count; u++)
            if (first[u] && kq->all_floats[u] && (u >= t || written >> u & 1) && stage_term(L, kq, u, first[u]))
                staged |= (uint32_t)1 << u;
        break;
    }
    for (int t = 0; staged; t++, staged >>= 1)
        if (staged & 1) commit_term(kq, t);
}

/* The rest of klua_query_advance past a chunk's last row: the next non-empty chunk, or false
 * (iteration finished) when there is none. */
static bool next_chunk(lua_State *L, klua_query *kq, int q_idx) {
    while (kq->row >= kq->it.count) {
        if (!kiln_query_next(&kq->it)) {
            kq->active = true; /* finish() expects it */
            klua_query_end(L, kq, q_idx, "query:each");
            return false;
        }
        kq->row = 0;
    }
    return true;
}

/* Moves to the next row; false (iteration finished) when there is none. */
bool klua_query_advance(lua_State *L, klua_query *kq, int q_idx) {
    kq->row++;
    return kq->row < kq->it.count || next_chunk(L, kq, q_idx);
}

/* Raises unless the running system is the one that began the loop (a coroutine resumed by
 * another system must not go on with it). */
void klua_query_check_owner(lua_State *L, const klua_query *kq) {
    if (kq->owner != kq->kw->current)
        klua_fail(L, "query:each", "this loop belongs to %s%s%s; it cannot go on here",
                  kq->owner ? "system '" : "code outside systems", kq->owner ? kq->owner->name : "",
                  kq->owner ? "'" : "");
}

static int lua_step_c(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(LSTEP_UPV_QUERY));
    if (!kq->active || kq->kw->closed || kq->loop_L != L) return 0; /* no rows for a loop ended */
    klua_query_check_owner(L, kq);
    if (kq->row >= 0) {
        if (kq->data_fields + kq->term_count + 8 > LUA_MINSTACK)
            luaL_checkstack(L, LSTEP_MAX_VALUES + 8, "too many fields");
        if (lua_gettop(L) < kq->data_fields) lua_settop(L, kq->data_fields); /* one per field */
        int first[KLUA_MAX_TERMS], arg = 1;
        for (int t = 0; t < kq->term_count; t++) {
            first[t] = kq->kind[t] == TERM_DATA && kq->writable[t] && kq->it.columns[t] ? arg : 0;
            if (kq->kind[t] == TERM_DATA) arg += kq->info[t].field_count;
        }
        klua_query_write_row(L, kq, first);
    } else {
        swap_views(L, kq, lua_upvalueindex(LSTEP_UPV_QUERY), true, "query:each"); /* a loop's first row */
    }
    int base = lua_gettop(L); /* the results go above the arguments */
    if (!klua_query_advance(L, kq, lua_upvalueindex(LSTEP_UPV_QUERY))) return 0;
    if (kq->data_fields + kq->term_count + 8 > LUA_MINSTACK)
        luaL_checkstack(L, LSTEP_MAX_VALUES + 8, "too many fields");
    kiln_entity e = kq->it.entities[kq->row];
    lua_pushinteger(L, (lua_Integer)e);
    for (int t = 0; t < kq->term_count; t++) {
        /* a data with-term's view is the step's V<k> */
        if (klua_query_push_simple(L, kq, t) || t < kq->with_count) continue;
        if (!kq->it.columns[t]) lua_pushnil(L);
        else lua_pushvalue(L, lua_upvalueindex(LSTEP_UPV_VIEWS + (kq->writable[t] ? 0 : kq->term_count) + t));
    }
    for (int t = 0; t < kq->term_count; t++) {
        void *col = kq->it.columns[t];
        if (kq->kind[t] != TERM_DATA) continue;
        const kiln_component_info *info = &kq->info[t];
        if (!col) { /* an optional term this archetype lacks */
            lua_settop(L, lua_gettop(L) + info->field_count);
            continue;
        }
        const uint8_t *row = (const uint8_t *)col + (size_t)kq->row * info->stride;
        if (kq->all_floats[t]) { /* pushing a number makes no object: read the column */
            for (int32_t f = 0; f < info->field_count; f++) {
                float v;
                memcpy(&v, row + info->fields[f].offset, 4);
                memcpy(kq->snap[t] + info->fields[f].offset, &v, 4);
                lua_pushnumber(L, v);
            }
            continue;
        }
        /* the query's own copy: what stage_term compares with, safe from the collector */
        memcpy(kq->snap[t], row, info->size);
        const uint8_t *src = kq->snap[t];
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                float v;
                memcpy(&v, src + fd->offset, 4);
                lua_pushnumber(L, v);
            } else {
                klua_push_field(L, fd, src);
            }
        }
    }
    return lua_gettop(L) - base;
}

/* The C step of a query whose terms are all structs of floats, as data with-terms (no
 * optional term, tag or Lua value: the movement loop a game writes first): lua_step_c
 * without its general cases, one function with no staged row. Measured: 2455 -> 2342
 * instructions a row, 2293 with the fields read at 4 * f. */
static int lua_step_floats(lua_State *L) {
    klua_query *kq = lua_touserdata(L, lua_upvalueindex(LSTEP_UPV_QUERY));
    if (!kq->active || kq->kw->closed || kq->loop_L != L) return 0; /* no rows for a loop ended */
    if (kq->owner != kq->kw->current) klua_query_check_owner(L, kq);
    int n = kq->term_count;
    if (kq->data_fields + 8 > LUA_MINSTACK) luaL_checkstack(L, LSTEP_MAX_VALUES + 8, "too many fields");
    if (kq->row >= 0) {
        if (lua_gettop(L) < kq->data_fields) lua_settop(L, kq->data_fields); /* one per field */
        /* a row lands whole or not at all: a bad value puts back the terms written before it
         * (nothing between runs Lua code or makes an object), then the general write-back,
         * which converts every term before it writes any, raises */
        uint64_t marked = kq->it.marked, masks[KLUA_MAX_TERMS];
        kiln_row_tick ticks[KLUA_MAX_TERMS];
        uint32_t written = 0;
        int arg = 1;
        for (int t = 0; t < n; arg += kq->info[t].field_count, t++) {
            if (!kq->writable[t]) continue;
            int done = write_floats(L, kq, t, arg, &ticks[t], &masks[t], true);
            if (done >= 0) {
                written |= (uint32_t)done << t;
                continue;
            }
            undo_floats(kq, t, written, ticks, masks, marked);
            int first[KLUA_MAX_TERMS];
            for (int u = 0, a = 1; u < n; a += kq->info[u].field_count, u++) first[u] = kq->writable[u] ? a : 0;
            klua_query_write_row(L, kq, first);
            break;
        }
    } else {
        swap_views(L, kq, lua_upvalueindex(LSTEP_UPV_QUERY), true, "query:each"); /* a loop's first row */
    }
    /* the results go above the arguments: the entity, then one number per field */
    if (++kq->row >= kq->it.count && !next_chunk(L, kq, lua_upvalueindex(LSTEP_UPV_QUERY))) return 0;
    int32_t row = kq->row;
    lua_pushinteger(L, (lua_Integer)kq->it.entities[row]);
    for (int t = 0; t < n; t++) { /* pushing a number makes no object: read the column */
        const kiln_component_info *info = &kq->info[t];
        const uint8_t *src = (const uint8_t *)kq->it.columns[t] + (size_t)row * info->stride;
        uint8_t *snap = kq->snap[t];
        for (int32_t f = 0; f < info->field_count; f++) {
            size_t off = (size_t)f * 4;
            float v;
            memcpy(&v, src + off, 4);
            memcpy(snap + off, &v, 4);
            lua_pushnumber(L, v);
        }
    }
    return 1 + kq->data_fields; /* every term is data (lua_step_fits counts their fields) */
}

/* True when a field name can stand in generated code as a quoted key. */
static bool plain_name(const char *s) {
    if (!*s || strlen(s) > 100) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static bool lua_step_fits(klua_query *kq) {
    int upvalues = 1, values = 1 + kq->term_count;
    for (int t = 0; t < kq->term_count; t++) {
        if (kq->kind[t] != TERM_DATA) continue;
        values += kq->info[t].field_count;
        upvalues += 2; /* D<k>, and V<k> or p<k> */
        for (int32_t f = 0; f < kq->info[t].field_count; f++)
            if (!plain_name(kq->info[t].fields[f].name)) return false;
    }
    kq->data_fields = (int16_t)(values - 1 - kq->term_count);
    return upvalues <= LSTEP_MAX_UPVALUES && values <= LSTEP_MAX_VALUES;
}

/* The generated source is written into a block sized first (src_bound), so writing it makes
 * no Lua object: making one may run a finalizer that closes the world, freeing the field
 * names the source quotes. */
typedef struct src_buf {
    char *p;
    size_t n, cap;
} src_buf;

static void add_str(src_buf *b, const char *s) {
    size_t len = strlen(s);
    if (len > b->cap - b->n) len = b->cap - b->n; /* not reached: src_bound bounds it */
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

static void add_char(src_buf *b, char c) {
    if (b->n < b->cap) b->p[b->n++] = c;
}

/* Adds fmt to b with each %d replaced by an int and each %s by a string: a formatter of our
 * own, as vsnprintf or a Lua string per piece made world:query several times slower. */
static void add_fmt(src_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (p[0] != '%' || (p[1] != 'd' && p[1] != 's')) {
            add_char(b, *p);
            continue;
        }
        if (*++p == 's') {
            add_str(b, va_arg(ap, const char *));
            continue;
        }
        char digits[12];
        int n = va_arg(ap, int), len = 0; /* never negative here */
        do digits[len++] = (char)('0' + n % 10); while ((n /= 10) > 0);
        while (len > 0) add_char(b, digits[--len]);
    }
    va_end(ap);
}

/* Bytes enough for lua_step_source's output: 128 per term and 96 per field besides its
 * name twice (each piece below takes fewer, with numbers of up to 10 digits). */
static size_t src_bound(const klua_query *kq) {
    size_t bound = 256;
    for (int t = 0; t < kq->term_count; t++) {
        bound += 128;
        for (int32_t f = 0; kq->kind[t] == TERM_DATA && f < kq->info[t].field_count; f++)
            bound += 96 + 2 * strlen(kq->info[t].fields[f].name);
    }
    return bound;
}

/* The generated step's source (see above). */
static void lua_step_source(const klua_query *kq, src_buf *b) {
    int n = kq->term_count;
    add_str(b, "local step");
    for (int t = 0; t < n; t++)
        if (kq->kind[t] == TERM_DATA) add_fmt(b, ", D%d", t + 1);
    add_str(b, " = ...\nlocal p0");
    for (int t = 0; t < kq->with_count; t++)
        if (kq->kind[t] == TERM_DATA) add_fmt(b, ", V%d", t + 1);
    for (int t = kq->with_count; t < n; t++)
        if (kq->kind[t] == TERM_DATA) add_fmt(b, ", p%d", t + 1);
    /* the results: e, t<k> per term but the data with-terms (V<k>), a<k>_<f> per data field */
    add_str(b, "\nreturn function()\nlocal e");
    for (int t = 0; t < n; t++)
        if (kq->kind[t] != TERM_DATA || t >= kq->with_count) add_fmt(b, ", t%d", t + 1);
    for (int t = 0; t < n; t++)
        for (int32_t f = 0; kq->kind[t] == TERM_DATA && f < kq->info[t].field_count; f++)
            add_fmt(b, ", a%d_%d", t + 1, (int)f + 1);
    add_str(b, " = step(");
    bool first = true;
    for (int t = 0; t < n; t++)
        for (int32_t f = 0; kq->kind[t] == TERM_DATA && f < kq->info[t].field_count; f++) {
            const char *name = kq->info[t].fields[f].name;
            if (t < kq->with_count) add_fmt(b, "%sD%d[\"%s\"]", first ? "" : ", ", t + 1, name);
            else add_fmt(b, "%s(p%d and D%d[\"%s\"])", first ? "" : ", ", t + 1, t + 1, name);
            first = false;
        }
    add_str(b, ")\nif e == nil then return nil end\n");
    for (int t = 0; t < n; t++) {
        if (kq->kind[t] != TERM_DATA) continue;
        bool optional = t >= kq->with_count;
        if (optional) add_fmt(b, "p%d = t%d\nif t%d then\n", t + 1, t + 1, t + 1);
        for (int32_t f = 0; f < kq->info[t].field_count; f++)
            add_fmt(b, "D%d[\"%s\"] = a%d_%d\n", t + 1, kq->info[t].fields[f].name, t + 1, (int)f + 1);
        if (optional) add_str(b, "end\n");
    }
    add_str(b, "return e");
    for (int t = 0; t < n; t++)
        add_fmt(b, kq->kind[t] == TERM_DATA && t < kq->with_count ? ", V%d" : ", t%d", t + 1);
    add_str(b, "\nend\n");
}

/* Makes the Lua step of the Query at q_idx (its views made) the closure q:each() hands out,
 * when the query fits; otherwise the C step (each_step) stays. */
void klua_query_make_step(lua_State *L, klua_query *kq, int q_idx) {
    if (!lua_step_fits(kq)) return;
    kq->lstep = true;
    int top = lua_gettop(L);
    luaL_checkstack(L, 2 * kq->term_count + 8, "too many terms");
    src_buf b = {NULL, 0, src_bound(kq)};
    b.p = lua_newuserdatauv(L, b.cap, 0);
    if (kq->kw->closed) luaL_error(L, "attempt to use a query of a closed world"); /* by a finalizer */
    lua_step_source(kq, &b);
    lua_pushlstring(L, b.p, b.n);
    lua_remove(L, -2);
    /* Queries of one shape share the compiled chunk, so world:query stays cheap. The cache
     * (registry: source -> chunk, its size at [1]) starts over past STEPS_CACHED shapes. */
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_STEPS) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_createtable(L, 1, 8);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, KLUA_REG_STEPS);
    }
    lua_pushvalue(L, -2);
    if (lua_rawget(L, -2) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        lua_rawgeti(L, -1, 1);
        lua_Integer cached = lua_tointeger(L, -1) + 1;
        lua_pop(L, 1);
        if (cached > STEPS_CACHED) {
            lua_pop(L, 1);
            lua_createtable(L, 1, 8);
            lua_pushvalue(L, -1);
            lua_setfield(L, LUA_REGISTRYINDEX, KLUA_REG_STEPS);
            cached = 1;
        }
        lua_pushinteger(L, cached);
        lua_rawseti(L, -2, 1);
        size_t len;
        const char *src = lua_tolstring(L, -2, &len);
        if (luaL_loadbuffer(L, src, len, "=(kiln each)") != LUA_OK) lua_error(L); /* a bug of ours */
        klua_jit_polymorphic(L, -1); /* LuaJIT: traces then hold no query's step (compat.h) */
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    /* its arguments: step (a C closure over the query and its views), then the inert table
     * for each D<k> (swap_views puts the views in when a loop starts) */
    klua_query_uv(L, q_idx, KLUA_QUERY_UV_DATA, "query:each");
    klua_query_uv(L, q_idx, KLUA_QUERY_UV_PROXIES, "query:each");
    int data_idx = lua_gettop(L) - 1, proxies_idx = lua_gettop(L);
    lua_pushvalue(L, q_idx);
    klua_query_views(L, kq, data_idx, "query:each");
    for (int t = 0; t < kq->term_count; t++) lua_rawgeti(L, proxies_idx, t + 1);
    if (kq->kw->closed) luaL_error(L, "attempt to use a query of a closed world"); /* by a finalizer */
    /* which C step: lua_step_floats when every term is a struct of floats (a schema of single
     * floats always is; a C component may place them otherwise) */
    bool floats = kq->with_count == kq->term_count;
    for (int t = 0; t < kq->term_count; t++) {
        floats &= kq->kind[t] == TERM_DATA && kq->all_floats[t];
        for (int32_t f = 0; floats && f < kq->info[t].field_count; f++)
            floats &= kq->info[t].fields[f].offset == 4 * (uint32_t)f;
    }
    lua_pushcclosure(L, floats ? lua_step_floats : lua_step_c, 1 + 2 * kq->term_count);
    klua_jit_unpin(L);
    int nargs = 1;
    for (int t = 0; t < kq->term_count; t++)
        if (kq->kind[t] == TERM_DATA) klua_query_uv(L, q_idx, KLUA_QUERY_UV_INERT, "query:each"), nargs++;
    lua_remove(L, data_idx);
    lua_remove(L, data_idx); /* the proxies */
    lua_call(L, nargs, 1);
    for (int i = 1;; i++) { /* the upvalue of each D<k>, which swap_views sets */
        const char *name = lua_getupvalue(L, -1, i);
        if (!name) break;
        lua_pop(L, 1);
        int t;
        if ((name[0] == 'D' || name[0] == 'V') && sscanf(name + 1, "%d", &t) == 1 && t >= 1 &&
            t <= kq->term_count)
            (name[0] == 'D' ? kq->lstep_upv : kq->lstep_vupv)[t - 1] = (uint8_t)i;
    }
    lua_setiuservalue(L, q_idx, KLUA_QUERY_UV_EACH);
    lua_settop(L, top);
}

