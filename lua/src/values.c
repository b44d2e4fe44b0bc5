/* values.c: conversion between Lua values and component bytes, driven by reflected fields.
 * Invariant: a conversion that fails leaves the destination bytes as they were. */
#include <math.h>
#include <string.h>

#include "klua.h"
#include "../../core/src/number_text.h" /* (header-only: no call into core internals) */
#include "refs.h"

static const char *const vec_keys[4] = {"x", "y", "z", "w"};

static int vec_width(kiln_type t) {
    switch (t) {
    case KILN_TYPE_VEC2: return 2;
    case KILN_TYPE_VEC3: return 3;
    case KILN_TYPE_VEC4:
    case KILN_TYPE_QUAT: return 4;
    case KILN_TYPE_MAT4: return 16;
    default: return 0;
    }
}

const kiln_field *klua_find_field(const kiln_component_info *info, const char *name) {
    for (int32_t i = 0; i < info->field_count; i++)
        if (strcmp(info->fields[i].name, name) == 0) return &info->fields[i];
    return NULL;
}

const kiln_field *klua_field_named(lua_State *L, const kiln_component_info *info, int idx) {
    if (lua_type(L, idx) != LUA_TSTRING) return NULL;
    size_t len;
    const char *name = lua_tolstring(L, idx, &len);
    return len <= KILN_MAX_NAME && strlen(name) == len ? klua_find_field(info, name) : NULL;
}

/* The integer an integer field's bytes at p read as in Lua: a uint64 past 2^63 - 1 as the
 * negative integer of the same 64 bits (math.ult compares them as unsigned), as set takes it. */
static lua_Integer stored_integer(kiln_type t, const uint8_t *p) {
    switch (t) {
    case KILN_TYPE_INT8: return *(const int8_t *)p;
    case KILN_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case KILN_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case KILN_TYPE_UINT8: return *p;
    case KILN_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case KILN_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return (lua_Integer)v; } /* int64, uint64, entity */
    }
}

static void push_scalar(lua_State *L, kiln_type t, const uint8_t *p) {
    switch (t) {
    case KILN_TYPE_BOOL: lua_pushboolean(L, *(const bool *)p); break;
    case KILN_TYPE_INT8: case KILN_TYPE_INT16: case KILN_TYPE_INT32: case KILN_TYPE_INT64:
    case KILN_TYPE_UINT8: case KILN_TYPE_UINT16: case KILN_TYPE_UINT32: case KILN_TYPE_UINT64:
    case KILN_TYPE_ENTITY: lua_pushinteger(L, stored_integer(t, p)); break;
    case KILN_TYPE_FLOAT: { float v; memcpy(&v, p, 4); lua_pushnumber(L, v); break; }
    case KILN_TYPE_DOUBLE: { double v; memcpy(&v, p, 8); lua_pushnumber(L, v); break; }
    default: lua_pushnil(L); break;
    }
}

/* Range of each integer type, for messages and checks. */
static void int_range(kiln_type t, lua_Integer *lo, lua_Integer *hi) {
    switch (t) {
    case KILN_TYPE_INT8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_TYPE_INT16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_TYPE_INT32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_TYPE_UINT8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_TYPE_UINT16: *lo = 0; *hi = UINT16_MAX; break;
    case KILN_TYPE_UINT32: *lo = 0; *hi = UINT32_MAX; break;
    case KILN_TYPE_ENTITY: *lo = 0; *hi = LUA_MAXINTEGER; break;
    default: *lo = LUA_MININTEGER; *hi = LUA_MAXINTEGER; break;
    }
}

const char *klua_to_float(lua_State *L, lua_Number n, float *dest) {
    char text[48]; /* as Lua writes a float this far out (lua_pushfstring's %f follows the locale) */
    if (isfinite(n) && fabs(n) > 3.4028234663852886e38)
        return lua_pushfstring(L, "number %s is out of range for float", kl_number_text(text, sizeof text, "%.14g", n));
    *dest = (float)n; /* in range, infinite or NaN: exact or as C converts it */
    return NULL;
}

/* Whether the number at idx is what the integer field bytes at p were read as: a view or a
 * bulk array filled from them and handed back. Such a value keeps the bytes, even when they
 * read as a number the field refuses (a uint64 past 2^63 - 1) or one LuaJIT rounded (past 2^53). */
static bool reads_as_stored(lua_State *L, int idx, kiln_type t, const uint8_t *p) {
    lua_Integer was = stored_integer(t, p);
    if (KLUA_LUAJIT) return lua_tonumber(L, idx) == (lua_Number)was;
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    return ok && v == was;
}

/* Whether n is what the float or double bytes at p were read as: the same number, -0 apart
 * from 0, or a NaN over a NaN (whose payload a read quiets, and LuaJIT drops). */
static bool reads_as_stored_real(lua_Number n, kiln_type t, const uint8_t *p) {
    if (t == KILN_TYPE_FLOAT) {
        float was;
        memcpy(&was, p, 4);
        return klua_same_float(n, was);
    }
    double was;
    memcpy(&was, p, 8);
    if (n == was) return n != 0 || signbit(n) == signbit(was);
    return n != n && was != was;
}

/* Converts the value at idx to a scalar of type t into p; NULL or a pushed message. With kept,
 * p holds the bytes the value was read from, and a number still equal to them keeps them. */
static const char *to_scalar(lua_State *L, int idx, kiln_type t, uint8_t *p, bool kept) {
    switch (t) {
    case KILN_TYPE_BOOL:
        if (!lua_isboolean(L, idx))
            return lua_pushfstring(L, "expected a boolean, got %s", luaL_typename(L, idx));
        *(bool *)p = lua_toboolean(L, idx);
        return NULL;
    case KILN_TYPE_FLOAT:
    case KILN_TYPE_DOUBLE: {
        if (lua_type(L, idx) != LUA_TNUMBER)
            return lua_pushfstring(L, "expected a number, got %s", luaL_typename(L, idx));
        lua_Number v = lua_tonumber(L, idx);
        if (kept && reads_as_stored_real(v, t, p)) return NULL;
        if (t == KILN_TYPE_FLOAT) {
            float f = 0;
            const char *err = klua_to_float(L, v, &f);
            if (err) return err;
            memcpy(p, &f, 4);
        } else {
            memcpy(p, &v, 8);
        }
        return NULL;
    }
    default: {
        if (kept && lua_type(L, idx) == LUA_TNUMBER && reads_as_stored(L, idx, t, p)) return NULL;
        int ok = 0;
        lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
        lua_Integer lo, hi;
        int_range(t, &lo, &hi);
        if (!ok && t == KILN_TYPE_UINT64 && lua_type(L, idx) == LUA_TNUMBER) { /* 2^63 .. 2^64 - 1 as a float */
            lua_Number n = lua_tonumber(L, idx);
            if (n == floor(n) && n >= 9223372036854775808.0 && n < 18446744073709551616.0) {
                uint64_t x = (uint64_t)n;
                memcpy(p, &x, 8);
                return NULL;
            }
        }
        if (!ok) {
            char text[48]; /* a float that is no integer: %.14g writes it as Lua would, with a '.' */
            if (lua_type(L, idx) == LUA_TNUMBER)
                return lua_pushfstring(L, "expected an integer, got %s",
                                       kl_number_text(text, sizeof text, "%.14g", lua_tonumber(L, idx)));
            return lua_pushfstring(L, "expected an integer, got %s", luaL_typename(L, idx));
        }
        if (v < lo || v > hi)
            return lua_pushfstring(L, "%I is out of range for %s [%I, %I]", v, kiln_type_name(t),
                                   lo, hi);
        switch (t) {
        case KILN_TYPE_INT8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
        case KILN_TYPE_INT16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
        case KILN_TYPE_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
        case KILN_TYPE_INT64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
        case KILN_TYPE_UINT8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
        case KILN_TYPE_UINT16: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
        case KILN_TYPE_UINT32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
        default: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; } /* a negative uint64: its bits */
        }
        return NULL;
    }
    }
}

/* One element (a scalar, a vector, a matrix) of a field. */
static void push_element(lua_State *L, kiln_type t, const uint8_t *p) {
    int w = vec_width(t);
    if (w == 0) {
        push_scalar(L, t, p);
        return;
    }
    lua_createtable(L, t == KILN_TYPE_MAT4 ? 16 : 0, t == KILN_TYPE_MAT4 ? 0 : w);
    for (int i = 0; i < w; i++) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        lua_pushnumber(L, f);
        if (t == KILN_TYPE_MAT4) lua_rawseti(L, -2, i + 1);
        else lua_setfield(L, -2, vec_keys[i]);
    }
}

/* The element index a key of a vector, quaternion or matrix table names, or -1. Vectors
 * and quaternions take {x =, y =, ...} or the array form {1, 2, ...}; a mat4 takes 16
 * numbers in column-major order. */
static int element_index(lua_State *L, int key_idx, kiln_type t, int w) {
    if (lua_isinteger(L, key_idx)) {
        lua_Integer k = lua_tointeger(L, key_idx);
        return k >= 1 && k <= w ? (int)k - 1 : -1;
    }
    if (t == KILN_TYPE_MAT4 || lua_type(L, key_idx) != LUA_TSTRING) return -1;
    const char *k = lua_tostring(L, key_idx);
    for (int i = 0; i < w; i++)
        if (strcmp(k, vec_keys[i]) == 0) return i;
    return -1;
}

/* Lua 5.4 and LuaJIT traverse a table's hash part in different orders, so a value with
 * several faults would name a different one under each. The converters below stop at the first
 * fault they meet, then report the one a fixed order picks: key faults first (numbers by
 * value, then strings by bytes, then other types by type name), then element or field order. */
static int key_rank(lua_State *L, int k) {
    return lua_type(L, k) == LUA_TNUMBER ? 0 : lua_type(L, k) == LUA_TSTRING ? 1 : 2;
}

/* Whether key a comes before key b in that order. */
static bool key_before(lua_State *L, int a, int b) {
    int ra = key_rank(L, a), rb = key_rank(L, b);
    if (ra != rb) return ra < rb;
    if (ra == 0) return lua_tonumber(L, a) < lua_tonumber(L, b);
    if (ra == 1) return strcmp(lua_tostring(L, a), lua_tostring(L, b)) < 0;
    return strcmp(luaL_typename(L, a), luaL_typename(L, b)) < 0;
}

/* The message for key k, which names no element of type t (w elements). */
static const char *bad_element_key(lua_State *L, int k, kiln_type t, int w) {
    k = lua_absindex(L, k);
    const char *got = lua_type(L, k) == LUA_TSTRING ? lua_pushfstring(L, "'%s'", lua_tostring(L, k))
                      : lua_type(L, k) == LUA_TNUMBER ? lua_pushfstring(L, "[%s]", lua_tostring(L, k))
                                                      : lua_pushfstring(L, "a %s key", luaL_typename(L, k));
    if (t == KILN_TYPE_MAT4) return lua_pushfstring(L, "mat4 takes 16 numbers [1] to [16], got %s", got);
    return lua_pushfstring(L, "%s takes %s or [1] to [%d], got %s", kiln_type_name(t),
                           w == 2 ? "x, y" : w == 3 ? "x, y, z" : "x, y, z, w", w, got);
}

/* The fault of vector table idx in the fixed order, pushed; idx is known to have one. */
static const char *element_fault(lua_State *L, int idx, kiln_type t, int w) {
    int best = lua_gettop(L) + 1;
    lua_pushnil(L); /* the first bad key in the fixed order */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (element_index(L, -2, t, w) < 0 && (lua_isnil(L, best) || key_before(L, -2, best))) {
            lua_pushvalue(L, -2);
            lua_replace(L, best);
        }
        lua_pop(L, 1);
    }
    if (!lua_isnil(L, best)) return bad_element_key(L, best, t, w);
    for (int i = 0; i < w && t != KILN_TYPE_MAT4; i++) {
        lua_pushstring(L, vec_keys[i]);
        bool named = lua_rawget(L, idx) != LUA_TNIL;
        bool placed = lua_rawgeti(L, idx, i + 1) != LUA_TNIL;
        lua_pop(L, 2);
        if (named && placed)
            return lua_pushfstring(L, "%s element %d given twice (by name and by position)",
                                   kiln_type_name(t), i + 1);
    }
    for (int i = 0; i < w; i++) {
        if (lua_rawgeti(L, idx, i + 1) == LUA_TNIL && t != KILN_TYPE_MAT4) {
            lua_pop(L, 1);
            lua_pushstring(L, vec_keys[i]);
            lua_rawget(L, idx);
        }
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            continue;
        }
        if (lua_type(L, -1) != LUA_TNUMBER) {
            if (t == KILN_TYPE_MAT4)
                return lua_pushfstring(L, "mat4 element %d: expected a number, got %s", i + 1,
                                       luaL_typename(L, -1));
            return lua_pushfstring(L, "%s.%s: expected a number, got %s", kiln_type_name(t),
                                   vec_keys[i], luaL_typename(L, -1));
        }
        float x;
        const char *err = klua_to_float(L, lua_tonumber(L, -1), &x);
        if (err) return lua_pushfstring(L, "%s element %d: %s", kiln_type_name(t), i + 1, err);
        lua_pop(L, 1);
    }
    return NULL;
}

static const char *to_element(lua_State *L, int idx, kiln_type t, uint8_t *p, bool kept) {
    int w = vec_width(t);
    if (w == 0) return to_scalar(L, idx, t, p, kept);
    if (!lua_istable(L, idx))
        return lua_pushfstring(L, "expected a table for %s, got %s", kiln_type_name(t),
                               luaL_typename(L, idx));
    float tmp[16];
    bool seen[16] = {false};
    memcpy(tmp, p, 4 * (size_t)w);
    idx = lua_absindex(L, idx);
    /* raw traversal: a conversion never runs Lua code (values go to shared scratch) */
    int top = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int i = element_index(L, -2, t, w);
        if (i < 0 || seen[i] || lua_type(L, -1) != LUA_TNUMBER ||
            (!(kept && klua_same_float(lua_tonumber(L, -1), tmp[i])) &&
             klua_to_float(L, lua_tonumber(L, -1), &tmp[i]))) {
            lua_settop(L, top);
            const char *err = element_fault(L, idx, t, w);
            return err ? err : lua_pushfstring(L, "bad %s", kiln_type_name(t)); /* not reached */
        }
        seen[i] = true;
        lua_pop(L, 1);
    }
    memcpy(p, tmp, 4 * (size_t)w);
    return NULL;
}

void klua_push_field(lua_State *L, const kiln_field *f, const uint8_t *base) {
    const uint8_t *p = base + f->offset;
    if (f->type == KILN_TYPE_CHAR) {
        size_t n = strnlen((const char *)p, f->count);
        lua_pushlstring(L, (const char *)p, n);
        return;
    }
    if (f->count <= 1) {
        push_element(L, f->type, p);
        return;
    }
    size_t size = kiln_type_size(f->type);
    lua_createtable(L, (int)f->count, 0);
    for (uint32_t i = 0; i < f->count; i++) {
        push_element(L, f->type, p + size * i);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* An array field's keys: 0 a string, 1 another non-position (a boolean, a fraction), 2 a
 * position below 1, 3 a position (checked against the length apart). */
static int array_key_rank(lua_State *L, int k) {
    if (lua_isinteger(L, k)) return lua_tointeger(L, k) < 1 ? 2 : 3;
    return lua_type(L, k) == LUA_TSTRING ? 0 : 1;
}

static bool array_key_before(lua_State *L, int a, int b) {
    int ra = array_key_rank(L, a), rb = array_key_rank(L, b);
    if (ra != rb) return ra < rb;
    if (ra == 2) return lua_tointeger(L, a) < lua_tointeger(L, b);
    return key_before(L, a, b);
}

static const char *to_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base, bool kept) {
    uint8_t *p = base + f->offset;
    idx = lua_absindex(L, idx);
    if (f->type == KILN_TYPE_CHAR) {
        if (lua_type(L, idx) != LUA_TSTRING)
            return lua_pushfstring(L, "expected a string, got %s", luaL_typename(L, idx));
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        if (n >= f->count)
            return lua_pushfstring(L, "string of %d bytes does not fit char[%d]", (int)n, (int)f->count);
        memset(p, 0, f->count);
        memcpy(p, s, n);
        return NULL;
    }
    if (f->count <= 1) return to_element(L, idx, f->type, p, kept);
    if (!lua_istable(L, idx))
        return lua_pushfstring(L, "expected an array of %d, got %s", (int)f->count, luaL_typename(L, idx));
    size_t size = kiln_type_size(f->type);
    /* Every key must be a position of the array: [1] to [count]. Of several bad keys the
     * fixed order names one (see key_rank): a string (the first by bytes), another type (the
     * first type name), the lowest position below 1, else the array's highest position. */
    int best = lua_gettop(L) + 1, count = (int)f->count;
    lua_Integer highest = 0;
    lua_pushnil(L); /* the bad key reported */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_Integer k = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : 1;
        if (k > highest) highest = k;
        if (array_key_rank(L, -2) < 3 && (lua_isnil(L, best) || array_key_before(L, -2, best))) {
            lua_pushvalue(L, -2);
            lua_replace(L, best);
        }
        lua_pop(L, 1);
    }
    if (lua_type(L, best) == LUA_TSTRING)
        return lua_pushfstring(L, "an array of %d takes positions [1] to [%d], got key '%s'", count, count,
                               lua_tostring(L, best));
    if (!lua_isnil(L, best) && !lua_isinteger(L, best))
        return lua_pushfstring(L, "an array of %d takes positions [1] to [%d], got a %s key", count, count,
                               luaL_typename(L, best));
    if (!lua_isnil(L, best))
        return lua_pushfstring(L, "an array of %d takes positions [1] to [%d], got [%I]", count, count,
                               lua_tointeger(L, best));
    lua_pop(L, 1);
    if (highest > (lua_Integer)count)
        return lua_pushfstring(L, "array of %I elements does not fit %d", highest, count);
    /* Convert into a copy first, so a bad element leaves the field untouched. A large array
     * is checked element by element first and then converted in place: no object is created
     * on the way (klua.h, rule 3a). */
    uint8_t tmp[1024];
    bool small = size * f->count <= sizeof tmp;
    for (int pass = small ? 1 : 0; pass < 2; pass++) {
        uint8_t *work = small ? tmp : p;
        if (small) memcpy(tmp, p, size * f->count);
        for (uint32_t i = 0; i < f->count; i++) {
            if (lua_rawgeti(L, idx, (lua_Integer)i + 1) != LUA_TNIL) {
                uint8_t one[64]; /* the largest element: a mat4 */
                uint8_t *dest = pass == 0 ? one : work + size * i;
                if (pass == 0) memcpy(one, p + size * i, size);
                const char *err = to_element(L, -1, f->type, dest, kept);
                if (err) return lua_pushfstring(L, "element %d: %s", (int)i + 1, err); /* caller raises */
            }
            lua_pop(L, 1);
        }
    }
    if (small) memcpy(p, tmp, size * f->count);
    return NULL;
}

const char *klua_to_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base) {
    return to_field(L, idx, f, base, false);
}

const char *klua_restage_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base) {
    return to_field(L, idx, f, base, true);
}

/* Whether key a of a table of fields is reported before key b: keys that are not strings
 * first (by type name), then names by bytes. */
static bool field_key_before(lua_State *L, int a, int b) {
    bool sa = lua_type(L, a) == LUA_TSTRING, sb = lua_type(L, b) == LUA_TSTRING;
    if (sa != sb) return sb;
    return sa ? strcmp(lua_tostring(L, a), lua_tostring(L, b)) < 0
              : strcmp(luaL_typename(L, a), luaL_typename(L, b)) < 0;
}

/* klua_read_fields' fault in the fixed order (see key_rank): a key that is not a string, then
 * a name the component lacks, then the fields in schema order. Raises. */
static KLUA_NORETURN void fail_fields(lua_State *L, int idx, const kiln_component_info *info, void *buf,
                                      const char *fname, kiln_entity e, int top) {
    char eb[24];
    lua_settop(L, top);
    int best = top + 1;
    lua_pushnil(L); /* the first bad key */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        bool bad = lua_type(L, -2) != LUA_TSTRING || !klua_field_named(L, info, -2);
        if (bad && (lua_isnil(L, best) || field_key_before(L, -2, best))) {
            lua_pushvalue(L, -2);
            lua_replace(L, best);
        }
        lua_pop(L, 1);
    }
    if (!lua_isnil(L, best) && lua_type(L, best) != LUA_TSTRING)
        klua_fail(L, fname, "%s fields are named by strings, got a %s key", info->name, luaL_typename(L, best));
    if (!lua_isnil(L, best)) {
        size_t len;
        const char *name = lua_tolstring(L, best, &len);
        klua_fail(L, fname, "%s has no field '%s'%s%s%s", info->name, klua_quote(L, name, len),
                  e ? " (entity " : "", e ? klua_entity_str(e, eb) : "", e ? ")" : "");
    }
    for (int32_t i = 0; i < info->field_count; i++) {
        const kiln_field *f = &info->fields[i];
        lua_pushstring(L, f->name);
        if (lua_rawget(L, idx) != LUA_TNIL) {
            const char *err = klua_to_field(L, -1, f, buf);
            if (err)
                klua_fail(L, fname, "field '%s' of %s%s%s: %s", f->name, info->name, e ? " on entity " : "",
                          e ? klua_entity_str(e, eb) : "", err);
        }
        lua_pop(L, 1);
    }
    klua_fail(L, fname, "bad value for %s", info->name); /* not reached: the caller met a fault */
}

void klua_read_fields(lua_State *L, int idx, const kiln_component_info *info, void *buf,
                      const char *fname, kiln_entity e) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx))
        klua_fail(L, fname, "value for %s must be a table of fields, got %s", info->name,
                  luaL_typename(L, idx));
    int top = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) fail_fields(L, idx, info, buf, fname, e, top);
        const kiln_field *f = klua_field_named(L, info, -2);
        if (!f) fail_fields(L, idx, info, buf, fname, e, top);
        const char *err;
        if (f->type == KILN_TYPE_FLOAT && f->count == 1 && lua_type(L, -1) == LUA_TNUMBER) {
            float v = 0; /* the common case, without the general conversion's calls */
            err = klua_to_float(L, lua_tonumber(L, -1), &v);
            if (!err) {
                memcpy((uint8_t *)buf + f->offset, &v, 4);
                lua_pop(L, 1);
                continue;
            }
        } else {
            /* a long array is converted element by element in C, where no hook runs: a budget
             * pays first (a mod setting a 1 MiB value in a loop held the host 12 times its limit) */
            if (f->count > KLUA_SHORT_ARRAY && f->type != KILN_TYPE_CHAR)
                klua_budget_charge(L, (double)f->count * KLUA_COST_ELEMENT, fname);
            err = klua_to_field(L, -1, f, buf);
        }
        if (err) fail_fields(L, idx, info, buf, fname, e, top);
        lua_pop(L, 1);
    }
}

void klua_push_value(lua_State *L, klua_world *kw, kiln_component c, const void *data) {
    if (klua_is_lua_valued(kw, c)) {
        int32_t ref;
        memcpy(&ref, data, sizeof ref);
        klua_value_push(L, kw, ref);
        return;
    }
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    if (info.size == 0 || data == NULL) {
        lua_pushboolean(L, 1);
        return;
    }
    lua_createtable(L, 0, info.field_count);
    klua_fill_fields(L, -1, &info, data);
}

/* Writes element e of type t at p into the table at idx in place (raw sets): x, y, z, w for
 * vectors and quaternions, [1] to [16] for a mat4. */
static void fill_element(lua_State *L, int idx, kiln_type t, const uint8_t *p) {
    int w = vec_width(t);
    for (int i = 0; i < w; i++) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        lua_pushnumber(L, f);
        if (t == KILN_TYPE_MAT4) {
            lua_rawseti(L, idx, i + 1);
        } else {
            lua_pushstring(L, vec_keys[i]);
            lua_insert(L, -2);
            lua_rawset(L, idx);
        }
    }
}

/* Refills the table at idx (the field's current value in a caller's table) in place. */
static void fill_nested(lua_State *L, int idx, const kiln_field *f, const uint8_t *base) {
    const uint8_t *p = base + f->offset;
    idx = lua_absindex(L, idx);
    if (f->count <= 1) {
        fill_element(L, idx, f->type, p);
        return;
    }
    size_t size = kiln_type_size(f->type);
    for (uint32_t i = 0; i < f->count; i++) {
        if (vec_width(f->type) && lua_rawgeti(L, idx, (lua_Integer)i + 1) == LUA_TTABLE) {
            fill_element(L, lua_gettop(L), f->type, p + size * i);
            lua_pop(L, 1);
            continue;
        }
        if (vec_width(f->type)) lua_pop(L, 1);
        push_element(L, f->type, p + size * i);
        lua_rawseti(L, idx, (lua_Integer)i + 1);
    }
}

void klua_fill_fields(lua_State *L, int idx, const kiln_component_info *info, const void *data) {
    idx = lua_absindex(L, idx);
    /* lua_setfield is a raw set on a table without a metatable */
    bool plain = !lua_getmetatable(L, idx);
    if (!plain) lua_pop(L, 1);
    for (int32_t i = 0; i < info->field_count; i++) {
        const kiln_field *f = &info->fields[i];
        if (plain && f->type == KILN_TYPE_FLOAT && f->count == 1) { /* the common case */
            float v;
            memcpy(&v, (const uint8_t *)data + f->offset, 4);
            lua_pushnumber(L, v);
            lua_setfield(L, idx, f->name);
            continue;
        }
        lua_pushstring(L, f->name);
        if (f->type != KILN_TYPE_CHAR && (vec_width(f->type) || f->count > 1)) {
            lua_pushvalue(L, -1);
            if (lua_rawget(L, idx) == LUA_TTABLE) { /* the caller's table: refilled in place */
                fill_nested(L, -1, f, data);
                lua_pop(L, 2);
                continue;
            }
            lua_pop(L, 1);
        }
        klua_push_field(L, f, data);
        lua_rawset(L, idx);
    }
}

void klua_fill_keyed(lua_State *L, klua_world *kw, const klua_comp *cc, int idx, const void *data) {
    int32_t n = cc->info.field_count;
    bool fresh = idx == 0;
    if (fresh) lua_createtable(L, 0, n);
    idx = fresh ? lua_gettop(L) : lua_absindex(L, idx);
    /* After a call that creates an object, a finalizer may have closed the world, freeing
     * cc and the fields it points to: checked before they are read again. */
    if (kw->closed) luaL_error(L, "attempt to use a closed world");
    if (klua_getref(L, LUA_REGISTRYINDEX, kw->names_ref) != LUA_TTABLE) klua_names_changed(L); /* the ready keys */
    int keys = lua_gettop(L);
    for (int32_t i = 0; i < n; i++) {
        const kiln_field *f = &cc->info.fields[i];
        lua_rawgeti(L, keys, cc->key0 + i);
        if (f->type == KILN_TYPE_FLOAT && f->count == 1) {
            float v;
            memcpy(&v, (const uint8_t *)data + f->offset, 4);
            lua_pushnumber(L, v);
        } else {
            /* a copy: making the field's tables may run a finalizer that closes the world */
            kiln_field fc = *f;
            f = &fc;
            if (!fresh && f->type != KILN_TYPE_CHAR && (vec_width(f->type) || f->count > 1)) {
                lua_pushvalue(L, -1);
                if (lua_rawget(L, idx) == LUA_TTABLE) { /* the caller's table: refilled in place */
                    fill_nested(L, -1, f, data);
                    lua_pop(L, 2);
                    if (kw->closed) luaL_error(L, "attempt to use a closed world");
                    continue;
                }
                lua_pop(L, 1);
            }
            klua_push_field(L, f, data);
            if (kw->closed) luaL_error(L, "attempt to use a closed world");
        }
        lua_rawset(L, idx);
    }
    lua_pop(L, 1);
}

void klua_default_value(const kiln_component_info *info, void *buf) {
    if (info->size == 0) return;
    if (info->defaults) memcpy(buf, info->defaults, info->size);
    else memset(buf, 0, info->size);
}

void klua_build_value(lua_State *L, klua_world *kw, kiln_component c, int idx, void *buf,
                      const kiln_component_info *info, const char *fname, kiln_entity e) {
    if (klua_is_lua_valued(kw, c)) {
        int32_t ref = klua_value_ref(L, kw, idx);
        memcpy(buf, &ref, sizeof ref);
        return;
    }
    klua_default_value(info, buf);
    if (info->size == 0) {
        if (!lua_isnoneornil(L, idx) && !(lua_isboolean(L, idx) && lua_toboolean(L, idx))) {
            char name[KILN_MAX_NAME + 1]; /* copied: making the message may run a finalizer closing the world */
            snprintf(name, sizeof name, "%s", info->name);
            klua_fail(L, fname, "%s is a tag: give true or nothing, not %s", name,
                      lua_isboolean(L, idx) ? "false" : luaL_typename(L, idx));
        }
        return;
    }
    if (lua_isnoneornil(L, idx)) return;
    if (info->field_count == 0) klua_fail(L, fname, "%s has no reflected fields to set from Lua", info->name);
    klua_read_fields(L, idx, info, buf, fname, e);
}

/* ---- Lua-valued components: each value lives in its world's values table, under a ref ----
 * The World's state table holds the values table, so a value leading back to its world (the
 * world itself, a query of it) keeps nothing alive once the script drops the world. Destroy
 * hooks get only the shared block: they find the table through a registry ref to a box that
 * holds it weakly. (A registry ref to the table itself made such a world immortal, and a
 * weak-keyed map World -> table would too under LuaJIT, which has no ephemerons.) */

/* Pushes the values table of shared, or nil once it is gone: its World was found unreachable
 * (its destroy hooks then release nothing, the table goes with the world). */
static int push_values(lua_State *L, const klua_shared *shared) {
    if (klua_getref(L, LUA_REGISTRYINDEX, shared->values_ref) != LUA_TTABLE) return lua_type(L, -1);
    lua_rawgeti(L, -1, 1);
    lua_replace(L, -2); /* (lua_remove rotates: a call more) */
    return lua_type(L, -1);
}

void klua_values_new(lua_State *L, klua_world *kw, int world_idx) {
    world_idx = lua_absindex(L, world_idx);
    lua_createtable(L, 1, 0); /* the box */
    if (luaL_getsubtable(L, LUA_REGISTRYINDEX, KLUA_REG_VALUES) == 0) {
        lua_pushstring(L, "v");
        lua_setfield(L, -2, "__mode");
    }
    lua_setmetatable(L, -2);
    lua_newtable(L);
    /* Rows may hold refs into the table of a World gone before (the state that held the world
     * closed, or this state's World was collected): their values went with it. Starting past
     * every ref handed out on the world, those read nil and free nothing here, and never name
     * a value of this table (a set took the next ref, then freed it as the row's old one). */
    if (kw->shared->ref_high > 0) klua_ref_start(L, -1, kw->shared->ref_high);
    lua_getiuservalue(L, world_idx, KLUA_WORLD_UV_STATE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, KLUA_STATE_VALUES);
    lua_pop(L, 1);
    lua_rawseti(L, -2, 1);
    kw->values_box_ref = kw->shared->values_ref = klua_ref(L, LUA_REGISTRYINDEX);
}

void klua_values_drop(lua_State *L, klua_world *kw, int world_idx) {
    if (lua_type(L, world_idx) == LUA_TUSERDATA) { /* the state: whatever the host left there */
        if (lua_getiuservalue(L, world_idx, KLUA_WORLD_UV_STATE) == LUA_TTABLE) {
            lua_pushstring(L, KLUA_STATE_VALUES);
            lua_pushnil(L);
            lua_rawset(L, -3); /* a closed world keeps no values */
        }
        lua_pop(L, 1);
    }
    /* (an owned world's block is gone with it; a host's world pushed again has another World,
     * and box, on the same block) */
    if (!kw->owned && kw->shared->values_ref == kw->values_box_ref) kw->shared->values_ref = LUA_NOREF;
    klua_unref(L, LUA_REGISTRYINDEX, kw->values_box_ref);
    kw->values_box_ref = LUA_NOREF;
}

void klua_unref_value(lua_State *L, klua_world *kw, kiln_component c, const void *buf) {
    if (!klua_is_lua_valued(kw, c)) return;
    int32_t ref;
    memcpy(&ref, buf, sizeof ref);
    if (push_values(L, kw->shared) == LUA_TTABLE) klua_unref(L, -1, ref);
    lua_pop(L, 1);
}

int klua_value_ref(lua_State *L, klua_world *kw, int idx) {
    idx = lua_absindex(L, idx);
    /* the world is open, so its table is there, unless a host script replaced the World's
     * state through the debug library (the box holds the table weakly) */
    if (push_values(L, kw->shared) != LUA_TTABLE)
        luaL_error(L, "the world's state was changed through the debug library");
    lua_pushvalue(L, idx);
    int ref = klua_ref(L, -2);
    lua_pop(L, 1);
    if (ref > kw->shared->ref_high) kw->shared->ref_high = ref;
    return ref;
}

void klua_value_push(lua_State *L, klua_world *kw, int ref) {
    if (push_values(L, kw->shared) != LUA_TTABLE) { /* (see klua_value_ref): the value is gone */
        lua_pop(L, 1);
        lua_pushnil(L);
        return;
    }
    klua_getref(L, -1, ref);
    lua_replace(L, -2);
}

void klua_value_hook(void *ptr, int32_t count, void *ctx) {
    klua_shared *shared = ctx;
    if (!shared->L) return; /* Lua is gone, and its values with it */
    lua_State *L = shared->L;
    if (push_values(L, shared) == LUA_TTABLE) { /* else the table died with its world */
        for (int32_t i = 0; i < count; i++) {
            int32_t ref;
            memcpy(&ref, (uint8_t *)ptr + 4 * (size_t)i, sizeof ref);
            if (ref > 0) klua_unref(L, -1, ref);
        }
    }
    lua_pop(L, 1);
}
