/* bulk.c: q:bulk, the column-array path: per block of rows fn gets field arrays per term (kept
 * across calls for float-only terms fn leaves unwritten), written back where fn changed them.
 * Invariant: a block is written back whole or not at all (a bad value anywhere leaves it as it was). */
#include <string.h>

#include "klua.h"

/* Keys of the bulk table (KLUA_QUERY_UV_BULK): arrays by (term, field), the work block. */
#define BULK_KEY(t, f) ((lua_Integer)((t) + 1) * 1024 + (f))
#define BULK_TERM_TABLE 1023 /* f of the table handed to fn for term t */
#define BULK_WORK (-1)
/* Rows handed to fn at once: a chunk is cut into blocks so that the arrays, the snapshot and
 * the stage of a block stay in cache between filling, fn and the write-back. */
#define BULK_BLOCK 512
/* Values read from an array before they are popped together. */
#define BULK_BATCH 32
#define KEPT_BATCH 64 /* the same for the arrays of float-only terms (kept_update) */

/* The bulk table is a Query's user value: a host script holding the debug library can reach
 * it (and fn can, while it runs), so what is read from it is checked before it is used. */
static KLUA_NORETURN void bulk_changed(lua_State *L) {
    klua_fail(L, "query:bulk", "its state was changed through the debug library");
}

/* Pushes the reusable table under key of the bulk table at bulk_idx, creating it. */
static void bulk_table(lua_State *L, int bulk_idx, lua_Integer key) {
    int type = lua_rawgeti(L, bulk_idx, key);
    if (type == LUA_TTABLE) return;
    if (type != LUA_TNIL) bulk_changed(L);
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawseti(L, bulk_idx, key);
}

static bool bulk_writes(const klua_query *kq, int t) {
    return kq->kind[t] == TERM_DATA && kq->writable[t] && kq->it.columns[t];
}

/* The entities array of the bulk table: BULK_KEY(-1, ENTS_ARRAY) the array, ENTS_STORED the
 * rows it holds. It is filled for every block, so raw readers (next, rawlen, the kiln calls
 * that take a list) see what # and ipairs see. */
enum { ENTS_ARRAY = 0, ENTS_STORED = 3 };

/* Stores n entities at 1 .. n of the array at arr, and clears what an earlier, longer block
 * left after them, so #, ipairs and pairs see this block alone (bulk at bulk_idx). */
static void ents_store(lua_State *L, int arr, int bulk_idx, const kiln_entity *ents, int32_t n) {
    for (int32_t r = 0; r < n; r++) {
        lua_pushinteger(L, (lua_Integer)ents[r]);
        lua_rawseti(L, arr, r + 1);
    }
    lua_rawgeti(L, bulk_idx, BULK_KEY(-1, ENTS_STORED));
    lua_Integer stored = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (stored > BULK_BLOCK) stored = BULK_BLOCK; /* a block's rows at most, whatever is there */
    for (lua_Integer i = n + 1; i <= stored; i++) {
        lua_pushnil(L);
        lua_rawseti(L, arr, i);
    }
    lua_pushinteger(L, n);
    lua_rawseti(L, bulk_idx, BULK_KEY(-1, ENTS_STORED));
}

/* Pushes the entities array of the bulk table at bulk_idx for rows [b0, b0 + n). */
static void bulk_entities(lua_State *L, klua_query *kq, int bulk_idx, int32_t b0, int32_t n) {
    bulk_table(L, bulk_idx, BULK_KEY(-1, ENTS_ARRAY));
    ents_store(L, lua_gettop(L), bulk_idx, kq->it.entities + b0, n);
}

/* ---- Kept arrays: float-only terms fn only reads keep their arrays from call to call ----
 * A writable data term whose fields are all single floats (kq->all_floats), which the last
 * call did not write, has arrays of its own per block ordinal k (the k-th block a call hands
 * to fn; the last slot serves every block past KEPT_SLOTS), with the bytes they stand for (the
 * slot's snapshot). A call refills only the rows whose column bytes differ from the
 * snapshot, and only while the arrays are trusted: from a write-back that read every value
 * and gave the array the float it wrote, until fn is called again. A term the last call
 * wrote gains nothing from this (giving the array its floats costs what a fill does) and
 * keeps to the shared arrays, which stay in cache; so does a read-only term, which is not
 * read back and so never trusted. */
#define KEPT_SLOTS 256
#define KEPT_KEY(k) (-16 - (lua_Integer)(k)) /* bulk table: slot k's table */
#define SLOT_STATE 0 /* slot table: its kept_slot; the arrays at KLUA_FIELD_KEY(t, f) */
#define BULK_WRITTEN BULK_KEY(-1, 4) /* bulk table: a bit per term the last call wrote */

typedef struct kept_slot {
    int32_t trusted[KLUA_MAX_TERMS]; /* per term: rows whose arrays hold exactly the snapshot */
    uint8_t *snap[KLUA_MAX_TERMS];   /* per float-only term: BULK_BLOCK rows of stride bytes,
                                      * in this block (set by kept_slot_push at every use) */
} kept_slot;

#if defined(__GNUC__)
#define KEPT_NOINLINE __attribute__((noinline)) /* the rare cases, out of the read-back loop */
#else
#define KEPT_NOINLINE
#endif

/* True when a float has a fraction: a number equal to it is then surely a float in Lua, not
 * an integer (which a fresh fill would not give). One instruction where SSE4.1 is on. */
static inline bool fractional(float x) { return truncf(x) != x; }

/* A float-only data term: read back by kept_update (from kept or shared arrays). */
static bool kept_term(const klua_query *kq, int t) {
    return kq->kind[t] == TERM_DATA && kq->all_floats[t];
}

/* Points the snapshots of the slot state s (a block of bytes) at their parts of it. */
static void kept_slot_layout(const klua_query *kq, kept_slot *s) {
    uint8_t *p = (uint8_t *)s + ((sizeof(kept_slot) + 15) & ~(size_t)15);
    for (int t = 0; t < kq->term_count; t++) {
        s->snap[t] = NULL;
        if (!kept_term(kq, t)) continue;
        s->snap[t] = p;
        p += ((size_t)BULK_BLOCK * kq->info[t].stride + 15) & ~(size_t)15;
    }
}

/* Pushes the table of slot k (made with its state on first use), then its state (held on the
 * stack while fn runs: fn may change the tables); returns the state. A state
 * found there is taken only as a block of its exact size, and laid out again: a host script
 * may have put another query's there (its trusted counts are then wrong, its bytes not). */
static kept_slot *kept_slot_push(lua_State *L, klua_query *kq, int bulk_idx, int32_t k) {
    size_t bytes = (sizeof(kept_slot) + 15) & ~(size_t)15;
    for (int t = 0; t < kq->term_count; t++)
        if (kept_term(kq, t)) bytes += ((size_t)BULK_BLOCK * kq->info[t].stride + 15) & ~(size_t)15;
    int type = lua_rawgeti(L, bulk_idx, KEPT_KEY(k));
    if (type == LUA_TTABLE) {
        if (lua_rawgeti(L, -1, SLOT_STATE) != LUA_TUSERDATA || lua_rawlen(L, -1) != bytes) bulk_changed(L);
        kept_slot *s = lua_touserdata(L, -1);
        kept_slot_layout(kq, s);
        return s;
    }
    if (type != LUA_TNIL) bulk_changed(L);
    lua_pop(L, 1);
    lua_createtable(L, 0, 4);
    kept_slot *s = lua_newuserdatauv(L, bytes, 0);
    memset(s, 0, sizeof *s);
    kept_slot_layout(kq, s);
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, SLOT_STATE);
    lua_pushvalue(L, -2);
    lua_rawseti(L, bulk_idx, KEPT_KEY(k));
    return s;
}

/* Fills the arrays of float-only term t in the slot table at slot_idx for rows [b0, b0 + n)
 * (only rows that changed, when trusted) and sets them in the term table at term_idx. */
static void kept_fill(lua_State *L, klua_query *kq, int t, kept_slot *s, int slot_idx, int term_idx,
                      int32_t b0, int32_t n) {
    const kiln_component_info *info = &kq->info[t];
    size_t stride = info->stride;
    const uint8_t *col = (const uint8_t *)kq->it.columns[t] + (size_t)b0 * stride;
    uint8_t *snap = s->snap[t];
    int32_t trusted = s->trusted[t] < n ? s->trusted[t] : n;
    s->trusted[t] = 0; /* fn may write the arrays: trusted again after a full read-back */
    int arr0 = lua_gettop(L) + 1;
    for (int32_t f = 0; f < info->field_count; f++)
        if (lua_rawgeti(L, slot_idx, KLUA_FIELD_KEY(t, f)) != LUA_TTABLE) {
            lua_pop(L, 1);
            lua_createtable(L, n, 0);
            lua_pushvalue(L, -1);
            lua_rawseti(L, slot_idx, KLUA_FIELD_KEY(t, f));
            trusted = 0;
        }
    if (trusted < n || memcmp(col, snap, (size_t)n * stride) != 0) {
        for (int32_t r = 0; r < n; r++) {
            const uint8_t *src = col + (size_t)r * stride;
            uint8_t *dst = snap + (size_t)r * stride;
            if (r < trusted && memcmp(src, dst, info->size) == 0) continue;
            memcpy(dst, src, stride); /* what the write-back compares with */
            for (int32_t f = 0; f < info->field_count; f++) {
                float v;
                memcpy(&v, dst + info->fields[f].offset, 4);
                lua_pushnumber(L, v);
                lua_rawseti(L, arr0 + f, r + 1);
            }
        }
    }
    for (int32_t f = info->field_count - 1; f >= 0; f--) lua_setfield(L, term_idx, info->fields[f].name);
}

/* The work of one block: per writable term, the snapshot of the block's rows (what the
 * arrays were filled with), their stage (what the write-back makes of them) and a changed
 * flag per row (a float-only term, written without a stage, saves there its rows and ticks
 * as they were: kept_save); which terms have kept arrays, and which the call wrote. */
typedef struct bulk_work {
    uint8_t *snap[KLUA_MAX_TERMS], *stage[KLUA_MAX_TERMS];
    uint64_t *changed[KLUA_MAX_TERMS]; /* per row: 1 when changed (a float-only term: its saved ticks) */
    bool keep[KLUA_MAX_TERMS];         /* the term's arrays are the slot's (kept), not the shared ones */
    kept_slot *slot;                   /* the block's kept arrays and their snapshots */
    int slot_idx;                      /* its table's stack slot */
    uint32_t written;                  /* terms the call wrote (so far) */
} bulk_work;

/* Phase 2: pushes fn's arguments for rows [b0, b0 + n) of the chunk after fn: n, the
 * entities (bulk_entities), then per term a table of field arrays (term.x[i]), true/false
 * for tags and absent optional terms. A writable term's shared arrays are filled from its
 * snapshot (bulk_snapshot, taken first): filling makes objects, so a finalizer may change the
 * rows meanwhile, and the arrays must hold exactly what the write-back compares with. */
static void bulk_fill(lua_State *L, klua_query *kq, int bulk_idx, const bulk_work *w, int32_t b0, int32_t n) {
    lua_pushinteger(L, n);
    bulk_entities(L, kq, bulk_idx, b0, n);
    const kiln_entity *ents = kq->it.entities + b0;
    for (int t = 0; t < kq->term_count; t++) {
        const kiln_component_info *info = &kq->info[t];
        if (kq->kind[t] == TERM_TAG) {
            /* every row of a chunk shares its archetype: ask the first */
            lua_pushboolean(L, t < kq->with_count || kiln_has(kq->kw->world, ents[0], kq->terms[t]));
            continue;
        }
        if (!kq->it.columns[t]) {
            lua_pushboolean(L, 0); /* an optional term this chunk lacks */
            continue;
        }
        bulk_table(L, bulk_idx, BULK_KEY(t, BULK_TERM_TABLE));
        lua_pushnil(L); /* a metatable fn set: gone, so setting the arrays runs no Lua */
        lua_setmetatable(L, -2);
        if (w->keep[t]) {
            kept_fill(L, kq, t, w->slot, w->slot_idx, lua_gettop(L), b0, n);
            continue;
        }
        const uint8_t *base = bulk_writes(kq, t) ? w->snap[t]
                                                 : (const uint8_t *)kq->it.columns[t] + (size_t)b0 * info->stride;
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            bulk_table(L, bulk_idx, BULK_KEY(t, f));
            if (fd->type == KILN_TYPE_FLOAT && fd->count == 1) {
                const uint8_t *src = base + fd->offset;
                size_t stride = info->stride; /* in locals: the calls would reload them */
                for (int32_t r = 0; r < n; r++, src += stride) {
                    float v;
                    memcpy(&v, src, 4);
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

/* Phase 1: copies the writable rows of the block into the query's own work block (fn may use
 * the world's scratch), so only what fn changed is written back and a world:set inside fn
 * stays. A kept term's snapshot is its slot's (kept_fill updates it row by row as it
 * fills); it gets a stage and its masks here. */
static void bulk_snapshot(lua_State *L, klua_query *kq, int bulk_idx, int32_t b0, int32_t n,
                          bulk_work *w) {
    /* each part starts 16-byte aligned: a check hook reads a staged row as its C type */
    size_t flags = ((size_t)n * sizeof(uint64_t) + 15) & ~(size_t)15, bytes = 0;
    for (int t = 0; t < kq->term_count; t++)
        if (bulk_writes(kq, t)) bytes += 2 * (((size_t)n * kq->info[t].stride + 15) & ~(size_t)15) + flags;
    uint8_t *block;
    if (lua_rawgeti(L, bulk_idx, BULK_WORK) == LUA_TUSERDATA && lua_rawlen(L, -1) >= bytes) {
        block = lua_touserdata(L, -1);
    } else {
        lua_pop(L, 1);
        block = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
        lua_pushvalue(L, -1);
        lua_rawseti(L, bulk_idx, BULK_WORK);
    }
    /* left on the stack while fn runs: fn may replace it in the bulk table (a host script
     * can reach the table), and the write-back still uses it */
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t)) continue;
        size_t rows = (size_t)n * kq->info[t].stride, part = (rows + 15) & ~(size_t)15;
        w->snap[t] = w->keep[t] ? w->slot->snap[t] : block;
        w->stage[t] = block + part;
        w->changed[t] = (uint64_t *)(void *)(block + 2 * part);
        block += 2 * part + flags;
        if (!w->keep[t])
            memcpy(w->snap[t], (const uint8_t *)kq->it.columns[t] + (size_t)b0 * kq->info[t].stride, rows);
    }
}

/* Puts term table tab (absolute) of term t back as fn was given it, each field holding its
 * array and nothing else, so that a call raising for a misspelt or replaced key leaves the
 * query's later calls working. */
static void bulk_reset_term(lua_State *L, int tab, klua_query *kq, int t, int bulk_idx, const bulk_work *w) {
    lua_pushnil(L);
    while (lua_next(L, tab)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, tab); /* clearing a present key during the traversal is allowed */
    }
    for (int32_t k = 0; k < kq->info[t].field_count; k++) {
        if (w->keep[t]) lua_rawgeti(L, w->slot_idx, KLUA_FIELD_KEY(t, k));
        else lua_rawgeti(L, bulk_idx, BULK_KEY(t, k));
        lua_pushstring(L, kq->info[t].fields[k].name);
        lua_insert(L, -2);
        lua_rawset(L, tab); /* raw: a metatable fn set on the table runs nothing */
    }
}

/* Raises naming the key of term table tab (absolute) that names no field of info; of several,
 * the same one under Lua 5.4 and LuaJIT (whose table orders differ): one that is not a string
 * (the first by type name), else the first name by bytes. */
static KLUA_NORETURN void bulk_fail_key(lua_State *L, int tab, klua_query *kq, int t, int bulk_idx,
                                        const bulk_work *w) {
    const kiln_component_info *info = &kq->info[t];
    int best = lua_gettop(L) + 1;
    lua_pushnil(L);
    lua_pushnil(L);
    while (lua_next(L, tab)) {
        lua_pop(L, 1);
        if (klua_field_named(L, info, -1)) continue;
        bool better = lua_isnil(L, best);
        if (!better) {
            bool s = lua_type(L, -1) == LUA_TSTRING, sb = lua_type(L, best) == LUA_TSTRING;
            better = s != sb ? sb
                             : strcmp(s ? lua_tostring(L, -1) : luaL_typename(L, -1),
                                      s ? lua_tostring(L, best) : luaL_typename(L, best)) < 0;
        }
        if (better) {
            lua_pushvalue(L, -1);
            lua_replace(L, best);
        }
    }
    size_t len = 0;
    const char *key = lua_type(L, best) == LUA_TSTRING ? lua_tolstring(L, best, &len) : luaL_typename(L, best);
    key = klua_quote(L, key, lua_type(L, best) == LUA_TSTRING ? len : strlen(key)); /* pushed: kept */
    bulk_reset_term(L, tab, kq, t, bulk_idx, w);
    klua_fail(L, "query:bulk", "%s has no field '%s'", kq->info[t].name, key);
}

/* Raises unless every key of a writable term table is one of the component's fields, each
 * still holding the array fn was given (w: kept or shared): a misspelt term.vx = {...} or a
 * replaced term.x must not pass silently (the write-back reads the arrays it handed out). A
 * misspelt key is named first, then the first field in schema order replaced or removed. */
static void bulk_check_terms(lua_State *L, klua_query *kq, int bulk_idx, const bulk_work *w) {
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t)) continue;
        const kiln_component_info *info = &kq->info[t];
        bulk_table(L, bulk_idx, BULK_KEY(t, BULK_TERM_TABLE));
        int tab = lua_gettop(L);
        int32_t seen = 0, f = -1; /* fields present; the first replaced (then removed) */
        lua_pushnil(L);
        while (lua_next(L, tab)) {
            const kiln_field *fd = klua_field_named(L, info, -2);
            if (!fd) bulk_fail_key(L, tab, kq, t, bulk_idx, w);
            int32_t k = (int32_t)(fd - info->fields);
            if (w->keep[t]) lua_rawgeti(L, w->slot_idx, KLUA_FIELD_KEY(t, k));
            else lua_rawgeti(L, bulk_idx, BULK_KEY(t, k));
            if (!lua_rawequal(L, -1, -2) && (f < 0 || k < f)) f = k; /* replaced */
            seen++;
            lua_pop(L, 2);
        }
        for (int32_t k = 0; seen < info->field_count && k < info->field_count && (f < 0 || k < f); k++) {
            lua_pushstring(L, info->fields[k].name); /* removed */
            if (lua_rawget(L, tab) == LUA_TNIL) f = k;
            lua_pop(L, 1);
        }
        if (f >= 0) {
            bulk_reset_term(L, tab, kq, t, bulk_idx, w);
            klua_fail(L, "query:bulk", "%s.%s is not the array fn was given (write into it, do not replace it)",
                      info->name, info->fields[f].name);
        }
        lua_pop(L, 1);
    }
}

/* Converts the value at idx for field fd into the staged row (was: the row's snapshot);
 * returns NULL or a pushed message. Unchanged text and integers keep their bytes. */
static const char *bulk_convert(lua_State *L, int idx, const kiln_field *fd, const uint8_t *was,
                                uint8_t *row) {
    if (fd->type == KILN_TYPE_CHAR && lua_type(L, idx) == LUA_TSTRING) {
        size_t len;
        const char *str = lua_tolstring(L, idx, &len);
        size_t old = strnlen((const char *)was + fd->offset, fd->count);
        if (len == old && memcmp(str, was + fd->offset, len) == 0) return NULL;
    }
    return klua_restage_field(L, idx, fd, row);
}

/* ---- The write-back of float-only terms: straight into the column, undone on a bad value ----
 * A float-only term's values are written to the column as they are read, and their rows
 * marked, with no stage and no second pass. Before the first write of a term, its rows'
 * bytes and ticks in this block are saved (in its stage and flags, kept_save); a bad value
 * found later (in this term or another) puts every saved term back (kept_undo) before the
 * error is raised, so a block is still written whole or not at all. Nothing between the save
 * and the undo makes an object (a number into a slot that held one allocates nothing), so no
 * finalizer or other Lua code can write the rows in between. */

/* Saves the column rows and ticks of float-only term t in [b0, b0 + n). */
static void kept_save(const klua_query *kq, int t, const bulk_work *w, int32_t b0, int32_t n) {
    size_t stride = kq->info[t].stride;
    memcpy(w->stage[t], (const uint8_t *)kq->it.columns[t] + (size_t)b0 * stride, (size_t)n * stride);
    memcpy(w->changed[t], kq->it.ticks[t] + b0, (size_t)n * sizeof(kiln_row_tick));
}

/* Puts back the rows and ticks kept_save saved for the float-only terms before term upto and
 * upto itself, and the iteration's marked terms as they were (marked). */
static void kept_undo(klua_query *kq, const bulk_work *w, int upto, int32_t b0, int32_t n, uint64_t marked) {
    for (int t = 0; t <= upto; t++) {
        if (!bulk_writes(kq, t) || !kept_term(kq, t)) continue;
        size_t stride = kq->info[t].stride;
        memcpy((uint8_t *)kq->it.columns[t] + (size_t)b0 * stride, w->stage[t], (size_t)n * stride);
        memcpy(kq->it.ticks[t] + b0, w->changed[t], (size_t)n * sizeof(kiln_row_tick));
    }
    kq->it.marked = marked;
}

/* The read-back of one value at idx (array at arr, row r) for float field f of term t that
 * held old, past kept_update's common case: 1 when it converts to a new float *nf, 0 when it
 * stands for old, -1 when it is bad (not a number, or a number beyond float range), which
 * kept_fail reports. Nothing is pushed. When a kept array does not hold exactly the float,
 * it is given it, as a fill would; a slot that held a value takes a number without allocating. */
static KEPT_NOINLINE int kept_value(lua_State *L, int idx, int arr, int32_t r, bool kept, float old, float *nf) {
    if (lua_type(L, idx) != LUA_TNUMBER) return -1;
    lua_Number v = lua_tonumber(L, idx);
    bool integer = trunc(v) == v && lua_isinteger(L, idx);
    bool fix;
    if (klua_same_float(v, old)) {
        *nf = old;
        fix = kept && integer;
    } else {
        if (isfinite(v) && fabs(v) > 3.4028234663852886e38) return -1;
        *nf = (float)v;
        fix = kept && (integer || !klua_same_float(v, *nf));
    }
    if (fix) {
        lua_pushnumber(L, *nf);
        lua_rawseti(L, arr, r + 1);
    }
    return memcmp(nf, &old, 4) != 0;
}

/* Raises for the bad value at idx of field f of term t, row r of the block at b0. */
static KLUA_NORETURN void kept_fail(lua_State *L, klua_query *kq, int t, int32_t f, int idx, int32_t r,
                                    int32_t b0) {
    const kiln_field *fd = &kq->info[t].fields[f];
    _Alignas(16) uint8_t row[256]; /* where the refused conversion would have gone */
    const char *err = klua_to_field(L, idx, fd, row); /* a pushed message: it is bad */
    char eb[24];
    klua_fail(L, "query:bulk", "%s.%s[%d] (entity %s): %s", kq->info[t].name, fd->name, (int)r + 1,
              klua_entity_str(kq->it.entities[b0 + r], eb), err ? err : "bad value");
}

/* Reads back the arrays of writable float-only term t (kept or shared, w->keep) and writes
 * each field fn changed to the column, marking its row; a kept term's snapshot follows, so
 * that its arrays, given the floats written, are trusted by the next call. A value still equal
 * to the float it was filled with costs one comparison. Returns -1 when done; else the field
 * of a bad value, left at the top of the stack with its row in *bad_row, or KEPT_CHANGED for
 * an array that is not a table; what it wrote is then still there (the caller undoes it). */
#define KEPT_CHANGED (-2)
static int32_t kept_update(lua_State *L, klua_query *kq, int t, bulk_work *w, int bulk_idx, int32_t b0,
                           int32_t n, int32_t *bad_row) {
    const kiln_component_info *info = &kq->info[t];
    size_t stride = info->stride;
    uint8_t *snap = w->snap[t], *col = (uint8_t *)kq->it.columns[t] + (size_t)b0 * stride;
    bool kept = w->keep[t], any = false;
    kept_save(kq, t, w, b0, n);
    for (int32_t f = 0; f < info->field_count; f++) {
        size_t off = info->fields[f].offset;
        int type = kept ? lua_rawgeti(L, w->slot_idx, KLUA_FIELD_KEY(t, f))
                        : lua_rawgeti(L, bulk_idx, BULK_KEY(t, f));
        if (type != LUA_TTABLE) return KEPT_CHANGED; /* bulk_check_terms compared, not typed */
        int arr = lua_gettop(L);
        uint8_t *was = snap + off, *dst = col + off;
        for (int32_t r0 = 0; r0 < n; r0 += KEPT_BATCH) {
            int32_t m = n - r0 < KEPT_BATCH ? n - r0 : KEPT_BATCH;
            for (int32_t r = r0; r < r0 + m; r++, was += stride, dst += stride) {
                float old, nf;
                memcpy(&old, was, 4);
                if (lua_rawgeti(L, arr, r + 1) == LUA_TNUMBER) {
                    lua_Number v = lua_tonumber(L, -1);
                    if (v == (lua_Number)old && fractional(old)) continue; /* as filled */
                    if (trunc(v) != v && fabs(v) <= 3.4028234663852886e38) {
                        /* a new float-subtype number with a fraction, in range (what a kernel
                         * computes): no integer, NaN or range error to tell apart */
                        nf = (float)v;
                        if (kept && (lua_Number)nf != v) { /* the array gets the float, as a fill would */
                            lua_pushnumber(L, nf);
                            lua_rawseti(L, arr, r + 1); /* the slot held a number: no allocation */
                        }
                        if (memcmp(&nf, &old, 4) == 0) continue; /* 0.1 for 0.1f: unchanged */
                        goto write;
                    }
                }
                switch (kept_value(L, lua_gettop(L), arr, r, kept, old, &nf)) {
                case 0: continue;
                case 1: break;
                default: *bad_row = r; return f; /* the value stays on the stack */
                }
            write:
                memcpy(dst, &nf, 4);
                if (kept) memcpy(was, &nf, 4); /* what the kept array now holds */
                kiln_iter_mark_changed(&kq->it, t, b0 + r);
                any = true;
            }
            lua_settop(L, arr);
        }
        lua_pop(L, 1);
    }
    if (any) w->written |= (uint32_t)1 << t;
    if (kept) w->slot->trusted[t] = n;
    return -1;
}

/* Phase 3: converts the arrays of every writable term but the float-only ones into the stage,
 * one read per value; a bad value raises before anything is written. Then the check hooks see
 * every changed row; then the float-only terms are read and written at once (kept_update,
 * undone on a bad value); only then are the staged fields that changed written and their rows
 * marked. */
static void bulk_write_back(lua_State *L, klua_query *kq, int bulk_idx, int32_t b0, int32_t n, bulk_work *w) {
    char eb[24];
    const kiln_entity *ents = kq->it.entities + b0;
    /* room for a batch of values, before anything is written (kept_update writes as it reads) */
    luaL_checkstack(L, (KEPT_BATCH > BULK_BATCH ? KEPT_BATCH : BULK_BATCH) + 8, "too many values");
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t) || kept_term(kq, t)) continue; /* float-only terms: last */
        const kiln_component_info *info = &kq->info[t];
        size_t stride = info->stride;
        memcpy(w->stage[t], w->snap[t], (size_t)n * stride);
        memset(w->changed[t], 0, (size_t)n * sizeof(uint64_t));
        for (int32_t f = 0; f < info->field_count; f++) {
            const kiln_field *fd = &info->fields[f];
            bool single_float = fd->type == KILN_TYPE_FLOAT && fd->count == 1;
            bulk_table(L, bulk_idx, BULK_KEY(t, f));
            int arr = lua_gettop(L);
            for (int32_t r0 = 0; r0 < n; r0 += BULK_BATCH) {
                int32_t m = n - r0 < BULK_BATCH ? n - r0 : BULK_BATCH;
                int types[BULK_BATCH];
                for (int32_t k = 0; k < m; k++) types[k] = lua_rawgeti(L, arr, r0 + k + 1);
                for (int32_t k = 0; k < m; k++) {
                    int32_t r = r0 + k;
                    int idx = arr + 1 + k;
                    const uint8_t *was = w->snap[t] + (size_t)r * stride;
                    uint8_t *row = w->stage[t] + (size_t)r * stride;
                    const char *err = NULL;
                    if (single_float && types[k] == LUA_TNUMBER) {
                        lua_Number v = lua_tonumber(L, idx);
                        float old;
                        memcpy(&old, was + fd->offset, 4);
                        if (klua_same_float(v, old)) continue; /* as filled */
                        float nf;
                        err = klua_to_float(L, v, &nf);
                        if (!err) {
                            if (memcmp(&nf, &old, 4) == 0) continue; /* 0.1 for 0.1f: no change */
                            memcpy(row + fd->offset, &nf, 4);
                        }
                    } else {
                        err = bulk_convert(L, idx, fd, was, row);
                        if (!err) lua_settop(L, arr + m); /* what the conversion pushed */
                    }
                    if (err)
                        klua_fail(L, "query:bulk", "%s.%s[%d] (entity %s): %s", info->name, fd->name,
                                  (int)r + 1, klua_entity_str(ents[r], eb), err);
                    w->changed[t][r] = 1;
                }
                lua_settop(L, arr);
            }
            lua_pop(L, 1);
        }
    }
    /* The check hooks (Parent) see every changed row as it would be after the write-back. */
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t) || !kq->info[t].has_check) continue;
        size_t stride = kq->info[t].stride;
        for (int32_t r = 0; r < n; r++) {
            const uint8_t *row = w->stage[t] + (size_t)r * stride;
            if (w->changed[t][r] && memcmp(row, w->snap[t] + (size_t)r * stride, kq->info[t].size) != 0 &&
                kiln_component_check(kq->kw->world, ents[r], kq->terms[t], row) != KILN_OK)
                klua_fail_world(L, kq->kw->world, "query:bulk");
        }
    }
    /* The float-only terms (none has a check hook), written as they are read: a bad value
     * puts back what they wrote before it raises. */
    uint64_t marked_before = kq->it.marked;
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t) || !kept_term(kq, t)) continue;
        int32_t bad_row = 0, f = kept_update(L, kq, t, w, bulk_idx, b0, n, &bad_row);
        if (f == -1) continue;
        kept_undo(kq, w, t, b0, n, marked_before);
        if (f == KEPT_CHANGED) bulk_changed(L);
        kept_fail(L, kq, t, f, lua_gettop(L), bad_row, b0);
    }
    /* Then the staged fields fn changed in the other terms (nothing here can raise), and
     * their rows marked. */
    for (int t = 0; t < kq->term_count; t++) {
        if (!bulk_writes(kq, t) || kept_term(kq, t)) continue;
        const kiln_component_info *info = &kq->info[t];
        size_t stride = info->stride;
        uint8_t *base = (uint8_t *)kq->it.columns[t] + (size_t)b0 * stride;
        for (int32_t r = 0; r < n; r++) {
            uint64_t mask = w->changed[t][r];
            if (!mask) continue;
            const uint8_t *row = w->stage[t] + (size_t)r * stride;
            const uint8_t *was = w->snap[t] + (size_t)r * stride;
            bool marked = false;
            for (int32_t f = 0; f < info->field_count; f++) {
                const kiln_field *fd = &info->fields[f];
                size_t fbytes = kiln_type_size(fd->type) * fd->count;
                if (memcmp(row + fd->offset, was + fd->offset, fbytes) != 0) {
                    memcpy(base + (size_t)r * stride + fd->offset, row + fd->offset, fbytes);
                    marked = true;
                }
            }
            if (marked) kiln_iter_mark_changed(&kq->it, t, b0 + r);
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
    klua_query_uv(L, 1, KLUA_QUERY_UV_BULK, "query:bulk");
    int bulk_idx = lua_gettop(L);
    int32_t block = 0; /* blocks handed out: the slot of kept arrays */
    /* terms the last call wrote; on a first call, every term (no kept arrays are made for
     * a term until a call leaves it unwritten) */
    uint32_t last = lua_rawgeti(L, bulk_idx, BULK_WRITTEN) == LUA_TNUMBER ? (uint32_t)lua_tointeger(L, -1) : ~0u;
    lua_pop(L, 1);
    bulk_work w;
    w.written = 0;
    while (kiln_query_next(&kq->it)) {
        bool keeps = false;
        for (int t = 0; t < kq->term_count; t++)
            keeps |= w.keep[t] = kept_term(kq, t) && bulk_writes(kq, t) && !(last >> t & 1);
        for (int32_t b0 = 0; b0 < kq->it.count; b0 += BULK_BLOCK) {
            int32_t n = kq->it.count - b0 < BULK_BLOCK ? kq->it.count - b0 : BULK_BLOCK;
            if (keeps) {
                w.slot = kept_slot_push(L, kq, bulk_idx, block < KEPT_SLOTS ? block : KEPT_SLOTS - 1);
            } else {
                lua_pushnil(L);
                lua_pushnil(L);
                w.slot = NULL;
            }
            w.slot_idx = lua_gettop(L) - 1;
            block++;
            bulk_snapshot(L, kq, bulk_idx, b0, n, &w);
            lua_pushvalue(L, 2);
            bulk_fill(L, kq, bulk_idx, &w, b0, n);
            for (int i = 0; i < nextra; i++) lua_pushvalue(L, 3 + i);
            lua_call(L, 2 + kq->term_count + nextra, 0); /* errors reach q_bulk's pcall */
            bulk_check_terms(L, kq, bulk_idx, &w);
            bulk_write_back(L, kq, bulk_idx, b0, n, &w);
            lua_pop(L, 3); /* the slot table, its state, the work block */
        }
    }
    /* kiln_query_next ended the iteration: the query lets go of it and of this thread (the
     * world's loops table held it) before anything here can raise (its end, when the loop's
     * changes could not all land, the first) */
    klua_query_end(L, kq, 1, "query:bulk");
    lua_pushinteger(L, (lua_Integer)w.written);
    lua_rawseti(L, bulk_idx, BULK_WRITTEN);
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
    /* Below the call: the query's guard (it marks the iteration as running, see
     * klua_query_begin), the query, then bulk_body and its arguments (the query, fn, extras).
     * All set before the iteration begins, so nothing between it and the pcall can raise. */
    lua_getiuservalue(L, 1, KLUA_QUERY_UV_GUARD);
    lua_insert(L, 1);
    lua_pushvalue(L, 2);
    lua_insert(L, 3);
    lua_pushcfunction(L, bulk_body);
    lua_insert(L, 3);
    klua_query_begin(L, kq, 2, fname);
    if (lua_pcall(L, lua_gettop(L) - 3, 0, 0) != LUA_OK) {
        /* End the iteration (landing deferred changes) before passing the error on. */
        klua_query_finish(L, kq, 2);
        return lua_error(L);
    }
    return 0;
}

static const luaL_Reg bulk_methods[] = {
    {"bulk", q_bulk},
    {NULL, NULL},
};

void klua_open_bulk(lua_State *L) { klua_addmethods(L, KLUA_QUERY, bulk_methods); }
