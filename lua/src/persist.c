/* persist.c: World methods over the persistence addon: save, load, name, lookup, clone.
 * "lua"-valued components and resources travel as plain data (nil, booleans, numbers, strings,
 * tables of those without cycles) in a tagged byte form; anything else fails naming it. */
#include <string.h>

#include "kiln_persist.h"
#include "console.h" /* klua_console_charge_read */
#include "klua.h"

#define MAX_DEPTH 100

enum { TAG_NIL, TAG_FALSE, TAG_TRUE, TAG_INT, TAG_FLOAT, TAG_STRING, TAG_TABLE };

/* ---- plain Lua data <-> bytes ---- */

typedef struct encoder {
    lua_State *L;
    kiln_write_fn write;
    void *ud;
    int seen;        /* stack index of a table of the tables being written (cycles) */
    char *why;
    size_t why_size;
    bool ok;
} encoder;

static void emit(encoder *en, const void *p, size_t n) {
    if (en->ok && !en->write(en->ud, p, n)) {
        snprintf(en->why, en->why_size, "out of memory");
        en->ok = false;
    }
}

static void refuse(encoder *en, const char *what) {
    if (!en->ok) return;
    snprintf(en->why, en->why_size, "%s cannot be saved (only nil, booleans, numbers, strings "
             "and tables of them without cycles, repeats or metatables)", what);
    en->ok = false;
}

/* Orders keys: booleans, then numbers, then strings (bytewise, not by locale). */
static bool key_less(lua_State *L, int a, int b) {
    int ta = lua_type(L, a), tb = lua_type(L, b);
    if (ta != tb) return ta < tb; /* LUA_TBOOLEAN < LUA_TNUMBER < LUA_TSTRING */
    if (ta == LUA_TBOOLEAN) return !lua_toboolean(L, a) && lua_toboolean(L, b);
    if (ta == LUA_TNUMBER) {
        if (lua_isinteger(L, a) && lua_isinteger(L, b)) return lua_tointeger(L, a) < lua_tointeger(L, b);
        return lua_tonumber(L, a) < lua_tonumber(L, b);
    }
    size_t na, nb;
    const char *sa = lua_tolstring(L, a, &na), *sb = lua_tolstring(L, b, &nb);
    int c = memcmp(sa, sb, na < nb ? na : nb);
    return c < 0 || (c == 0 && na < nb);
}

/* Sorts the count keys at [1..count] of the table at index list (key_less): a few in place, more
 * by merging runs into a second table and back (n log n comparisons, whatever order lua_next
 * gave). Returns the index of the table holding them sorted (list or the second, pushed above). */
static int sort_keys(lua_State *L, int list, uint32_t count) {
    if (count <= 8) { /* a few: insertion in place, without a second table */
        for (uint32_t n = 2; n <= count; n++)
            for (uint32_t i = n; i > 1; i--) {
                lua_rawgeti(L, list, (lua_Integer)i - 1);
                lua_rawgeti(L, list, (lua_Integer)i);
                if (!key_less(L, -1, -2)) {
                    lua_pop(L, 2);
                    break;
                }
                lua_rawseti(L, list, (lua_Integer)i - 1);
                lua_rawseti(L, list, (lua_Integer)i);
            }
        return list;
    }
    lua_createtable(L, count < INT32_MAX ? (int)count : 0, 0);
    int from = list, to = lua_gettop(L);
    for (uint64_t width = 1; width < count; width *= 2) {
        for (uint64_t lo = 1; lo <= count; lo += 2 * width) {
            uint64_t mid = lo + width < count + 1 ? lo + width : count + 1;
            uint64_t hi = lo + 2 * width < count + 1 ? lo + 2 * width : count + 1;
            uint64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                lua_rawgeti(L, from, (lua_Integer)i);
                lua_rawgeti(L, from, (lua_Integer)j);
                if (key_less(L, -1, -2)) { /* the right one first; the left stays for later */
                    lua_rawseti(L, to, (lua_Integer)k++);
                    lua_pop(L, 1);
                    j++;
                } else {
                    lua_pop(L, 1);
                    lua_rawseti(L, to, (lua_Integer)k++);
                    i++;
                }
            }
            for (; i < mid; i++) {
                lua_rawgeti(L, from, (lua_Integer)i);
                lua_rawseti(L, to, (lua_Integer)k++);
            }
            for (; j < hi; j++) {
                lua_rawgeti(L, from, (lua_Integer)j);
                lua_rawseti(L, to, (lua_Integer)k++);
            }
        }
        int swap = from;
        from = to;
        to = swap;
    }
    return from;
}

/* Writes the value at the top of the stack (left there). */
static void encode_value(encoder *en, int depth) {
    lua_State *L = en->L;
    uint8_t tag;
    switch (lua_type(L, -1)) {
    case LUA_TNIL: tag = TAG_NIL; emit(en, &tag, 1); return;
    case LUA_TBOOLEAN: tag = lua_toboolean(L, -1) ? TAG_TRUE : TAG_FALSE; emit(en, &tag, 1); return;
    case LUA_TNUMBER:
        /* -0.0 is a float: LuaJIT (one number type) calls it integral, and an integer loses
         * its sign */
        if (lua_isinteger(L, -1) && !(lua_tonumber(L, -1) == 0 && signbit(lua_tonumber(L, -1)))) {
            lua_Integer i = lua_tointeger(L, -1);
            tag = TAG_INT;
            emit(en, &tag, 1);
            emit(en, &i, 8);
        } else {
            lua_Number d = lua_tonumber(L, -1);
            tag = TAG_FLOAT;
            emit(en, &tag, 1);
            emit(en, &d, 8);
        }
        return;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        if (n > UINT32_MAX) {
            refuse(en, "a string over 4 GiB");
            return;
        }
        uint32_t n32 = (uint32_t)n;
        tag = TAG_STRING;
        emit(en, &tag, 1);
        emit(en, &n32, 4);
        emit(en, s, n);
        return;
    }
    case LUA_TTABLE: break;
    default: refuse(en, lua_typename(L, lua_type(L, -1))); return;
    }
    if (depth >= MAX_DEPTH) {
        refuse(en, "a table nested more than 100 deep");
        return;
    }
    /* a level holds the table, its keys, their sorting copy, a key and a value */
    if (!lua_checkstack(L, 8)) {
        refuse(en, "a table nested too deep for the Lua stack");
        return;
    }
    if (lua_getmetatable(L, -1)) { /* what it does (its __index, its class) would be lost */
        lua_pop(L, 1);
        refuse(en, "a table with a metatable");
        return;
    }
    /* seen[t]: false while t is being written (met again: a cycle), true once written (met
     * again: shared, which a load would turn into two tables, and which doubling at each level
     * would make 2^100 tables long) */
    lua_pushvalue(L, -1);
    if (lua_rawget(L, en->seen) != LUA_TNIL) {
        bool done = lua_toboolean(L, -1);
        lua_pop(L, 1);
        refuse(en, done ? "a table reached twice" : "a table that contains itself");
        return;
    }
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushboolean(L, 0);
    lua_rawset(L, en->seen);
    /* keys in a canonical order, so the same table always saves to the same bytes */
    int t = lua_gettop(L);
    lua_newtable(L);
    uint32_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt != LUA_TBOOLEAN && kt != LUA_TNUMBER && kt != LUA_TSTRING) {
            /* its identity is what it means as a key, and a load would make another */
            lua_settop(L, t);
            refuse(en, kt == LUA_TTABLE ? "a table used as a key" : lua_typename(L, kt));
            return;
        }
        lua_pushvalue(L, -1);
        lua_rawseti(L, t + 1, (lua_Integer)++count);
    }
    int keys = sort_keys(L, t + 1, count);
    tag = TAG_TABLE;
    emit(en, &tag, 1);
    emit(en, &count, 4);
    for (uint32_t i = 1; i <= count && en->ok; i++) {
        lua_rawgeti(L, keys, (lua_Integer)i);
        encode_value(en, depth + 1); /* key */
        lua_rawget(L, t);
        encode_value(en, depth + 1); /* value */
        lua_pop(L, 1);
    }
    lua_settop(L, t);
    lua_pushvalue(L, -1);
    lua_pushboolean(L, 1);
    lua_rawset(L, en->seen);
}

/* Encodes the value at idx; false with why written when it is not plain data. */
static bool encode(lua_State *L, int idx, kiln_write_fn write, void *ud, char *why, size_t why_size) {
    idx = lua_absindex(L, idx);
    lua_newtable(L);
    encoder en = {L, write, ud, lua_gettop(L), why, why_size, true};
    lua_pushvalue(L, idx);
    encode_value(&en, 0);
    lua_settop(L, en.seen - 1);
    return en.ok;
}

typedef struct decoder {
    lua_State *L;
    const uint8_t *p;
    size_t size, pos;
} decoder;

/* Pushes the next value; false (nothing pushed) when the bytes are not a valid encoding. */
static bool decode_value(decoder *de, int depth) {
    lua_State *L = de->L;
    if (de->pos >= de->size || depth > MAX_DEPTH || !lua_checkstack(L, 4)) return false;
    uint8_t tag = de->p[de->pos++];
    uint64_t v;
    uint32_t n;
    switch (tag) {
    case TAG_NIL: lua_pushnil(L); return true;
    case TAG_FALSE: case TAG_TRUE: lua_pushboolean(L, tag == TAG_TRUE); return true;
    case TAG_INT: case TAG_FLOAT:
        if (de->size - de->pos < 8) return false;
        memcpy(&v, de->p + de->pos, 8);
        de->pos += 8;
        if (tag == TAG_INT) lua_pushinteger(L, (lua_Integer)v);
        else {
            lua_Number d;
            memcpy(&d, &v, 8);
            lua_pushnumber(L, d);
        }
        return true;
    case TAG_STRING:
        if (de->size - de->pos < 4) return false;
        memcpy(&n, de->p + de->pos, 4);
        de->pos += 4;
        if (de->size - de->pos < n) return false;
        lua_pushlstring(L, (const char *)de->p + de->pos, n);
        de->pos += n;
        return true;
    case TAG_TABLE:
        /* what the encoder writes and nothing more: a table deeper than it goes, or keyed by
         * what it refuses, would load and then fail the next save */
        if (depth >= MAX_DEPTH || de->size - de->pos < 4) return false;
        memcpy(&n, de->p + de->pos, 4);
        de->pos += 4;
        if (n > (de->size - de->pos) / 2) return false; /* each pair takes two bytes at least */
        /* room for a few entries only: a count is a claim, and 99 nested tables each
         * claiming the bytes left would take hundreds of times the value's size at once */
        lua_createtable(L, 0, n < 64 ? (int)n : 64);
        for (uint32_t i = 0; i < n; i++) {
            if (!decode_value(de, depth + 1)) return lua_pop(L, 1), false;
            int kt = lua_type(L, -1);
            if ((kt != LUA_TBOOLEAN && kt != LUA_TNUMBER && kt != LUA_TSTRING) ||
                (kt == LUA_TNUMBER && lua_tonumber(L, -1) != lua_tonumber(L, -1)) || !decode_value(de, depth + 1))
                return lua_pop(L, 2), false;
            lua_rawset(L, -3);
        }
        return true;
    default: return false;
    }
}

static bool decode(lua_State *L, const void *data, size_t size) {
    decoder de = {L, data, size, 0};
    if (!decode_value(&de, 0)) return false;
    if (de.pos != size) return lua_pop(L, 1), false;
    return true;
}

/* ---- Lua work inside kiln's calls ----
 * The codec and the load's callbacks run inside kiln_save / kiln_load: a Lua error there (out
 * of memory) must not unwind through kiln's C, which would leak its memory or leave half a
 * load. Each runs under lua_pcall, and a failure becomes the callback's refusal. */

typedef struct lua_work {
    klua_world *kw;
    int32_t ref;                 /* encode: the value's ref; decode: the ref made (0: nil) */
    kiln_write_fn write;         /* encode */
    void *write_ud;
    const void *data;            /* decode */
    size_t size;
    bool ok;                     /* the work's own answer: plain data, a valid encoding */
    char *why;
    size_t why_size;
} lua_work;

/* Calls fn(w, the nargs values on top) protected, leaving nresults; a Lua error is written to
 * w->why and returned (LUA_ERRMEM: out of memory), nothing left on the stack. */
static int protect(lua_State *L, lua_CFunction fn, lua_work *w, int nargs, int nresults) {
    if (!lua_checkstack(L, 2 + nresults)) {
        lua_pop(L, nargs);
        snprintf(w->why, w->why_size, "out of memory");
        return LUA_ERRMEM;
    }
    lua_pushlightuserdata(L, w);
    lua_insert(L, -(nargs + 1));
    int rc = klua_pcall_c(L, fn, nargs + 1, nresults, 0); /* raises nothing: kiln_load is below */
    if (rc == LUA_OK) return rc;
    snprintf(w->why, w->why_size, "%s", rc == LUA_ERRMEM ? "out of memory"
                                        : lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "a Lua error");
    lua_pop(L, 1);
    return rc;
}

/* encode(value at 2, or the value of w->ref when there is no argument) -> w->ok */
static int encode_work(lua_State *L) {
    lua_work *w = lua_touserdata(L, 1);
    if (lua_gettop(L) < 2) {
        if (w->ref > 0) klua_value_push(L, w->kw, w->ref);
        else lua_pushnil(L);
    }
    w->ok = encode(L, 2, w->write, w->write_ud, w->why, w->why_size);
    return 0;
}

/* decode(w->data) -> w->ok, and the value: a ref in w->ref (w->kw set), else returned */
static int decode_work(lua_State *L) {
    lua_work *w = lua_touserdata(L, 1);
    w->ok = decode(L, w->data, w->size);
    if (!w->ok || !w->kw) return w->ok ? 1 : 0;
    w->ref = lua_isnil(L, -1) ? 0 : klua_value_ref(L, w->kw, -1);
    return 0;
}

static kiln_result failed_work(int rc) { return rc == LUA_ERRMEM ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INVALID_ARGUMENT; }

/* ---- the codec for "lua"-valued components ---- */

typedef struct codec_ctx {
    klua_world *kw;
    lua_State *L; /* the thread running the method */
} codec_ctx;

/* The codec handles the world's own "lua" components: any other component with hooks (kiln's
 * own bookkeeping, a C host's) holds what a Lua value cannot stand for. */
static bool not_lua_valued(const codec_ctx *cx, kiln_component c, char *why, size_t why_size) {
    if (klua_is_lua_valued(cx->kw, c)) return false;
    snprintf(why, why_size, "it is not a Lua-valued component of this world");
    return true;
}

static kiln_result codec_encode(void *ud, kiln_component c, kiln_entity e, const void *value,
                                kiln_write_fn write, void *write_ud, char *why, size_t why_size) {
    codec_ctx *cx = ud;
    int32_t ref;
    memcpy(&ref, value, sizeof ref);
    (void)e;
    if (not_lua_valued(cx, c, why, why_size)) return KILN_ERR_INVALID_ARGUMENT;
    if (!cx->kw->shared) { /* a mod's view: the values are in the host's state, out of its reach */
        snprintf(why, why_size, "its values live in the host's Lua state (a mod cannot save them)");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    lua_work w = {.kw = cx->kw, .ref = ref, .write = write, .write_ud = write_ud, .why = why, .why_size = why_size};
    int rc = protect(cx->L, encode_work, &w, 0, 0);
    if (rc != LUA_OK) return failed_work(rc);
    return w.ok ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
}

static kiln_result codec_decode(void *ud, kiln_component c, const void *data, size_t size, void *dest,
                                char *why, size_t why_size) {
    codec_ctx *cx = ud;
    if (not_lua_valued(cx, c, why, why_size)) return KILN_ERR_INVALID_ARGUMENT;
    lua_work w = {.kw = cx->kw, .data = data, .size = size, .why = why, .why_size = why_size};
    int rc = protect(cx->L, decode_work, &w, 0, 0);
    if (rc != LUA_OK) return failed_work(rc);
    if (!w.ok) {
        snprintf(why, why_size, "its Lua value is corrupt");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    memcpy(dest, &w.ref, sizeof w.ref);
    return KILN_OK;
}

static void codec_discard(void *ud, kiln_component c, void *value) {
    codec_ctx *cx = ud;
    (void)c;
    klua_value_hook(value, 1, cx->kw->shared);
}

/* ---- world:save / world:load ---- */

/* A kiln_write_fn collecting into a userdata-backed byte buffer (no Lua stack use). */
typedef struct byte_sink {
    lua_State *L;
    uint8_t *data;
    size_t size, cap;
    bool refused; /* the allocator refused a growth: the save ran out of memory */
} byte_sink;

static bool sink_write(void *ud, const void *data, size_t size) {
    byte_sink *s = ud;
    if (size > s->cap - s->size) {
        size_t ncap = s->cap ? s->cap : 4096;
        while (ncap - s->size < size) {
            if (ncap > SIZE_MAX / 2) return false;
            ncap *= 2;
        }
        void *aud;
        lua_Alloc fa = lua_getallocf(s->L, &aud);
        uint8_t *p = fa(aud, s->data, s->data ? s->cap : 0, ncap);
        if (!p) return s->refused = true, false;
        s->data = p;
        s->cap = ncap;
    }
    memcpy(s->data + s->size, data, size);
    s->size += size;
    return true;
}

static void sink_free(byte_sink *s) {
    void *aud;
    lua_Alloc fa = lua_getallocf(s->L, &aud);
    if (s->data) fa(aud, s->data, s->cap, 0);
    s->data = NULL;
}

/* The format named by opts.format (argument arg), binary by default. */
static kiln_persist_format check_format(lua_State *L, int arg, const char *fname) {
    static const char *const keys[] = {"format", NULL};
    if (lua_isnoneornil(L, arg)) return KILN_PERSIST_BINARY;
    if (!lua_istable(L, arg)) klua_typeerror(L, arg, fname, "table");
    klua_check_keys(L, arg, arg, fname, keys, false);
    lua_pushliteral(L, "format");
    lua_rawget(L, arg);
    const char *f = lua_tostring(L, -1);
    kiln_persist_format format = KILN_PERSIST_BINARY;
    if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TSTRING && strcmp(f, "binary") == 0)) format = KILN_PERSIST_BINARY;
    else if (lua_type(L, -1) == LUA_TSTRING && strcmp(f, "json") == 0) format = KILN_PERSIST_JSON;
    else klua_argerror(L, arg, fname, "format must be \"binary\" or \"json\"");
    lua_pop(L, 1);
    return format;
}

/* the string of w->size bytes at w->data */
static int push_bytes_work(lua_State *L) {
    lua_work *w = lua_touserdata(L, 1);
    lua_pushlstring(L, w->data, w->size);
    return 1;
}

static int w_save(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:save";
    int opts = 3;
    bool to_file = lua_type(L, 2) == LUA_TSTRING;
    if (kw->host && to_file) klua_fail(L, fname, "a mod cannot write files; save without a path to get the data");
    if (to_file && strlen(lua_tostring(L, 2)) != lua_rawlen(L, 2)) /* C would write the path before the NUL */
        klua_argerror(L, 2, fname, "a path without NUL bytes expected");
    if (!to_file && lua_istable(L, 2) && lua_isnoneornil(L, 3)) opts = 2;
    else if (!to_file && !lua_isnil(L, 2)) klua_typeerror(L, 2, fname, "path (string) or options (table)");
    kiln_persist_format format = check_format(L, opts, fname);
    /* Lua-valued resources go along as host data, encoded first (nothing written yet). */
    byte_sink host = {L, NULL, 0, 0, false};
    char why[200];
    /* (a state changed through the debug library has no table of them: refused, not saved
     * without them, as world:resource refuses to reach them) */
    if (!klua_push_state(L, 1, KLUA_STATE_RESOURCES))
        klua_fail(L, fname, "the world's state was changed through the debug library: its Lua resources "
                  "cannot be saved");
    lua_work w = {.kw = kw, .write = sink_write, .write_ud = &host, .why = why, .why_size = sizeof why};
    if (protect(L, encode_work, &w, 1, 0) != LUA_OK || !w.ok) {
        sink_free(&host);
        klua_fail(L, fname, "Lua resource: %s", why);
    }
    codec_ctx cx = {kw, L};
    kiln_persist_codec codec = {codec_encode, codec_decode, codec_discard, &cx};
    /* under a budget, JSON's work is charged and any save stops at the time limit */
    klua_budget_watch watch = {.L = L, .steps_per_unit = format == KILN_PERSIST_JSON ? KLUA_COST_JSON_UNIT : 0};
    kiln_save_desc d = {.format = format, .codec = &codec, .exclude = {kw->shared_type},
                        .host_data = host.data ? host.data : (const void *)"", .host_size = host.size,
                        .progress = klua_budget_watch_report, .progress_ud = &watch};
    kiln_result r;
    byte_sink out = {L, NULL, 0, 0, false};
    if (to_file) r = kiln_save_file(kw->world, lua_tostring(L, 2), &d);
    else r = kiln_save(kw->world, &d, sink_write, &out);
    sink_free(&host);
    if (r != KILN_OK) {
        sink_free(&out);
        if (out.refused) klua_fail(L, fname, "out of memory"); /* (kiln says its writer refused) */
        if (watch.stopped) klua_budget_watch_end(&watch, fname);
        klua_fail_world(L, kw->world, fname);
    }
    if (to_file) return klua_budget_watch_end(&watch, fname), 0;
    w = (lua_work){.data = out.data ? out.data : (const void *)"", .size = out.size, .why = why, .why_size = sizeof why};
    int rc = protect(L, push_bytes_work, &w, 0, 1); /* the buffer is freed whatever happens */
    sink_free(&out);
    if (rc != LUA_OK) klua_fail(L, fname, "%s", why);
    klua_budget_watch_end(&watch, fname); /* (the data is on the stack: nothing to free) */
    return 1;
}

/* What world:load keeps on the stack, at fixed slots above its arguments (made before the load:
 * once entities land, nothing may allocate, so nothing can raise). */
typedef struct load_ctx {
    lua_State *L;
    klua_world *kw;
    int map;        /* the old -> new table, made in on_ready with room for every entity */
    int host;       /* the saved Lua resources (nil until on_host decodes them) */
    int resources;  /* on_ready: the world's Lua resources with the saved ones merged in */
    const char *overdue; /* why the load was stopped (a console statement out of time) */
} load_ctx;

/* Sets into the table made with room for it: no allocation, so no error while the load lands. */
static void on_mapped(void *ud, kiln_entity old_e, kiln_entity new_e) {
    load_ctx *lc = ud;
    lua_pushinteger(lc->L, (lua_Integer)new_e);
    lua_rawseti(lc->L, lc->map, (lua_Integer)old_e);
}

static bool on_host(void *ud, const void *data, size_t size, char *why, size_t why_size) {
    load_ctx *lc = ud;
    if (size == 0) return true;
    lua_work w = {.data = data, .size = size, .why = why, .why_size = why_size};
    if (protect(lc->L, decode_work, &w, 0, 1) != LUA_OK) return false;
    int value = lua_gettop(lc->L);
    bool named = w.ok && lua_istable(lc->L, value); /* a table of resources by name (string) */
    lua_pushnil(lc->L);
    while (named && lua_next(lc->L, value)) { /* (allocates nothing: no error here) */
        named = lua_type(lc->L, -2) == LUA_TSTRING;
        lua_pop(lc->L, named ? 1 : 2);
    }
    if (!named) {
        lua_settop(lc->L, value - 1);
        snprintf(why, why_size, "the Lua resources are corrupt");
        return false;
    }
    if (klua_resources_hidden(lc->L, lc->kw, value, why, why_size)) {
        lua_settop(lc->L, value - 1);
        return false;
    }
    lua_replace(lc->L, lc->host);
    return true;
}

/* ready_work(world, saved resources or nil): the map table with room for w->size entities, and
 * a copy of the world's Lua resources with the saved ones over them (swapped in once the load
 * has landed) */
static int ready_work(lua_State *L) {
    enum { WORLD = 2, SAVED, MAP, MERGED, STATE, OWN };
    lua_work *w = lua_touserdata(L, 1);
    lua_createtable(L, 0, w->size < INT32_MAX ? (int)w->size : INT32_MAX);
    lua_newtable(L);
    if (!klua_push_state(L, WORLD, KLUA_STATE_RESOURCES))
        return luaL_error(L, "the world's state was changed through the debug library");
    lua_pushnil(L); /* (the slot the state took) */
    lua_insert(L, STATE);
    const int from[] = {OWN, SAVED};
    for (int k = 0; k < 2; k++) {
        if (!lua_istable(L, from[k])) continue;
        lua_pushnil(L);
        while (lua_next(L, from[k])) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, MERGED);
        }
    }
    lua_settop(L, MERGED);
    return 2;
}

static bool on_ready(void *ud, int64_t entities, char *why, size_t why_size) {
    load_ctx *lc = ud;
    lua_work w = {.size = (size_t)entities, .why = why, .why_size = why_size};
    lua_pushvalue(lc->L, 1);
    lua_pushvalue(lc->L, lc->host);
    if (protect(lc->L, ready_work, &w, 2, 2) != LUA_OK) return false;
    lua_replace(lc->L, lc->resources);
    lua_replace(lc->L, lc->map);
    return true;
}

/* A mod's tag in a save: the entities are the mod's again only while it is loaded, within its
 * entity limit (the manager says, or refuses the load); else they land as the host's, which a
 * mod loaded later under that name must not take (count, and despawn at its unload). Other
 * owner marks (a C host's) load as saved. Allocates nothing. */
static bool on_owned(void *ud, kiln_component mark, int64_t entities, bool *drop, char *why, size_t why_size) {
    klua_world *kw = ((load_ctx *)ud)->kw;
    bool mine = false;
    if (kw->load_owned && !kw->load_owned(kw, mark, entities, false, &mine, why, why_size)) return false;
    kiln_component_info info;
    *drop = !mine && kiln_component_info_get(kw->world, mark, &info) && klua_is_mod_tag(&info);
    return true;
}

/* A console statement's time limit holds inside the load's reading too (a large JSON text
 * takes seconds to read). Allocates nothing: it only reads the registry. */
static bool on_keep_going(void *ud) {
    load_ctx *lc = ud;
    lc->overdue = klua_console_overdue(lc->L);
    return lc->overdue == NULL;
}

static bool looks_like_data(const char *s, size_t n) { /* a save cut inside its magic is data too */
    if (n > 0 && memcmp(s, "KILNSAVE", n < 8 ? n : 8) == 0) return true;
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i < n && s[i] == '{';
}

static int w_load(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:load";
    if (kw->host) klua_fail(L, fname, "a mod cannot load into the host's world");
    static const char *const keys[] = {"skip_unknown", NULL};
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, fname, "path or saved data (string)");
    bool skip = false;
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_istable(L, 3)) klua_typeerror(L, 3, fname, "table");
        klua_check_keys(L, 3, 3, fname, keys, false);
        lua_pushliteral(L, "skip_unknown");
        lua_rawget(L, 3);
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) klua_argerror(L, 3, fname, "skip_unknown must be a boolean");
        skip = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    size_t n;
    const char *s = lua_tolstring(L, 2, &n);
    bool data = looks_like_data(s, n);
    if (!data && strlen(s) != n) klua_argerror(L, 2, fname, "a path without NUL bytes expected"); /* (another file) */
    uint64_t json_max; /* (a file is read no further than charged, nor parsed as JSON past what fits) */
    uint64_t charged = klua_console_charge_read(L, fname, s, n, !data, true, &json_max);
    /* Slots 4..6 (padded nils, or extra arguments) become the load's. No lua_settop below
     * them: klua_self's collector guard sits above the arguments, and closing it from
     * lua_settop runs its __close where Lua 5.4.4 can leave the stack top pointing into a
     * stack the call moved (its bug 5: a load's error message was then freed while raised). */
    if (!lua_checkstack(L, 8)) klua_fail(L, fname, "out of memory");
    for (int slot = 4; slot <= 6; slot++) {
        lua_pushnil(L);
        lua_replace(L, slot);
    }
    load_ctx lc = {L, kw, 4, 5, 6, NULL};
    codec_ctx cx = {kw, L};
    kiln_persist_codec codec = {codec_encode, codec_decode, codec_discard, &cx};
    kiln_load_desc d = {.skip_unknown = skip, .codec = &codec, .mapped = on_mapped, .host = on_host,
                        .ready = on_ready, .ud = &lc, .keep_going = on_keep_going, .owned = on_owned,
                        .max_bytes = charged, .max_json_bytes = json_max};
    kiln_result r = data ? kiln_load(kw->world, s, n, &d) : kiln_load_file(kw->world, s, &d);
    if (r != KILN_OK && lc.overdue) klua_fail(L, fname, "%s", lc.overdue);
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    /* the saved Lua resources join the world's: the merged table takes the place of its own
     * (raw, as on_ready found the state: no Lua has run since, and nothing here may raise) */
    if (lua_istable(L, lc.resources) && lua_getiuservalue(L, 1, KLUA_WORLD_UV_STATE) == LUA_TTABLE) {
        lua_pushstring(L, KLUA_STATE_RESOURCES);
        lua_pushvalue(L, lc.resources);
        lua_rawset(L, -3);
    }
    lua_pushvalue(L, lc.map); /* (returned from the top: see the slots above) */
    return 1;
}

/* ---- names, clone ---- */

/* A read of names from a system must be declared (the core's guard would stop the program);
 * nothing to check while the world has no names. */
static void check_names_read(lua_State *L, klua_world *kw, const char *fname) {
    kiln_component id = kiln_component_lookup(kw->world, "Name");
    if (id != KILN_NO_COMPONENT) klua_check_access(L, kw, id, false, fname);
}

static int w_name(lua_State *L) {
    bool setting = lua_gettop(L) >= 3; /* counted before klua_self pads the arguments */
    klua_world *kw = klua_self(L);
    const char *fname = "world:name";
    kiln_entity e = klua_check_entity(L, 2, fname);
    if (!setting) {
        klua_check_alive(L, kw, e, fname);
        check_names_read(L, kw, fname);
        lua_pushstring(L, kiln_name_get(kw->world, e)); /* NULL: nil */
        return 1;
    }
    if (!lua_isnil(L, 3) && lua_type(L, 3) != LUA_TSTRING) klua_typeerror(L, 3, fname, "string or nil");
    size_t n = 0;
    const char *name = lua_isnil(L, 3) ? NULL : lua_tolstring(L, 3, &n);
    if (name && strlen(name) != n) klua_argerror(L, 3, fname, "a name cannot hold a NUL byte");
    kiln_component id;
    if (kiln_name_init(kw->world, &id) != KILN_OK) klua_fail_world(L, kw->world, fname);
    klua_check_access(L, kw, id, true, fname);
    bool removing = false;
    if (kw->mod_hooks && kiln_is_alive(kw->world, e)) { /* a name is a component: a mod's add or removal */
        bool has = kiln_has(kw->world, e, id);
        kiln_component_info info;
        kiln_component_info_get(kw->world, id, &info);
        if (name && !has) kw->mod_hooks->before_add(L, kw, e, id);
        else if (!name && has) kw->mod_hooks->before_remove(L, kw, e, id, fname), removing = true;
        else if (name && strcmp(name, kiln_name_get(kw->world, e)) != 0) /* a rename */
            kw->mod_hooks->before_change(L, kw, e, id, NULL, fname);
        if (name && !has) kw->mod_hooks->before_grow(L, kw, e, id, (int64_t)(info.stride + sizeof(kiln_row_tick)), fname);
        else if (!name && has) kw->mod_hooks->before_reshape(L, kw, e, id, false, fname);
    }
    if (kiln_name_set(kw->world, e, name) != KILN_OK) klua_fail_world(L, kw->world, fname);
    if (removing) kw->mod_hooks->queued(kw); /* (counted in the frame's queue once it is queued) */
    return 0;
}

static int w_lookup(lua_State *L) {
    klua_world *kw = klua_self(L);
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, "world:lookup", "string");
    check_names_read(L, kw, "world:lookup");
    size_t n;
    const char *name = lua_tolstring(L, 2, &n);
    /* no name holds a NUL: C would look up the part before it */
    kiln_entity e = klua_name_ok(name, n) ? kiln_name_lookup(kw->world, name) : 0;
    if (e) lua_pushinteger(L, (lua_Integer)e);
    else lua_pushnil(L);
    return 1;
}

static int w_clone(lua_State *L) {
    klua_world *kw = klua_self(L);
    const char *fname = "world:clone";
    if (kw->host) klua_fail(L, fname, "a mod spawns with world:spawn or a prefab (its entities carry its tag)");
    static const char *const keys[] = {"tree", NULL};
    kiln_entity e = klua_check_entity(L, 2, fname);
    kiln_clone_desc d = {false};
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_istable(L, 3)) klua_typeerror(L, 3, fname, "table");
        klua_check_keys(L, 3, 3, fname, keys, false);
        lua_pushliteral(L, "tree");
        lua_rawget(L, 3);
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) klua_argerror(L, 3, fname, "tree must be a boolean");
        d.tree = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    klua_check_alive(L, kw, e, fname);
    kiln_entity copy;
    /* the time limit holds inside a large tree's copy, and copies made past it are taken back
     * in C rather than lost to the raise at the caller's next instruction */
    klua_budget_watch watch = {.L = L};
    d.keep_going = klua_budget_watch_continue;
    d.ud = &watch;
    if (kiln_clone(kw->world, e, &d, &copy) != KILN_OK) {
        if (watch.stopped) klua_budget_watch_end(&watch, fname);
        klua_fail_world(L, kw->world, fname);
    }
    lua_pushinteger(L, (lua_Integer)copy);
    return 1;
}

static const luaL_Reg persist_methods[] = {
    {"name", w_name},
    {"lookup", w_lookup},
    {"clone", w_clone},
    {"save", w_save},
    {"load", w_load},
    {NULL, NULL},
};

void klua_open_persist(lua_State *L) {
    klua_addmethods(L, KLUA_WORLD, persist_methods);
}
