/* jvalue.c: component values as JSON for prefabs and scenes, in the world's layout: fields by
 * name, entity fields as node or scene numbers. Invariant: every JSON type is checked before
 * it is read, and a refusal names the path of the value ("entities[2].components.Pos.x"). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "number_text.h"
#include "scene_internal.h"

bool pz_json_fail(pz_json *j, kiln_result code, const char *fmt, ...) {
    if (j->r != KILN_OK) return false;
    char detail[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    size_t n = strlen(j->path);
    if (n > 120) j->r = kl_fail(j->world, code, "%s: at ...%s: %s", j->call, j->path + n - 100, detail);
    else if (n) j->r = kl_fail(j->world, code, "%s: at %s: %s", j->call, j->path, detail);
    else j->r = kl_fail(j->world, code, "%s: %s", j->call, detail);
    return false;
}

size_t pz_json_key(pz_json *j, const char *key) {
    size_t n = strlen(j->path);
    snprintf(j->path + n, sizeof j->path - n, "%s%.60s%s", n ? "." : "", key, strlen(key) > 60 ? "..." : "");
    return n;
}

size_t pz_json_index(pz_json *j, size_t i) {
    size_t n = strlen(j->path);
    snprintf(j->path + n, sizeof j->path - n, "[%zu]", i);
    return n;
}

void pz_json_pop(pz_json *j, size_t mark) { j->path[mark] = 0; }

static const char *type_of(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

bool pz_json_expect(pz_json *j, const json_t *v, bool ok, const char *what) {
    if (ok) return true;
    return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "%s expected, got %s", what, v ? type_of(v) : "nothing");
}

bool pz_json_expect_array(pz_json *j, const json_t *v, uint32_t count) {
    if (json_is_array(v) && json_array_size(v) == count) return true;
    if (json_is_array(v)) /* both counts: "got an array" alone does not tell what is wrong */
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "an array of %u elements expected, got one of %zu",
                            (unsigned)count, json_array_size(v));
    return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "an array of %u elements expected, got %s", (unsigned)count,
                        v ? type_of(v) : "nothing");
}

bool pz_json_keys(pz_json *j, const json_t *v, const char *const *keys) {
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        bool known = false;
        for (int k = 0; keys[k] && !known; k++) known = strcmp(keys[k], key) == 0;
        if (known) continue;
        char list[120] = "";
        for (int k = 0; keys[k]; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", keys[k]);
        pz_json_key(j, key);
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "unknown key (expected %s)", list);
    }
    return true;
}

bool pz_json_ask(pz_json *j, uint64_t done, uint64_t total, const char *what) {
    if (j->r != KILN_OK) return false;
    if (!j->keep_going || j->keep_going(j->keep_ud)) return true;
    j->r = kl_fail(j->world, KILN_ERR_LIMIT, "%s: stopped by the caller after %llu of %llu %s", j->call,
                   (unsigned long long)done, (unsigned long long)total, what);
    return false;
}

/* The text handed to jansson piece by piece, so that keep_going is asked between pieces. */
typedef struct text_feed {
    pz_json *j;
    const char *data;
    size_t size, at, asked_at;
} text_feed;

static size_t feed(void *buffer, size_t length, void *ud) {
    text_feed *f = ud;
    if (f->at - f->asked_at >= PZ_ASK_BYTES) {
        f->asked_at = f->at;
        if (!pz_json_ask(f->j, f->at, f->size, "bytes")) return (size_t)-1; /* jansson's read error */
    }
    size_t n = f->size - f->at < length ? f->size - f->at : length;
    memcpy(buffer, f->data + f->at, n);
    f->at += n;
    return n;
}

const char *pz_json_error_hint(const json_error_t *err) {
    return strncmp(err->text, "too big integer", 15) == 0
               ? " (no number past 9223372036854775807 parses: a uint64 field takes one as a string of digits)"
               : "";
}

size_t pz_json_too_deep(const void *data, size_t size, pz_scan_ask_fn ask, void *ud) {
    const unsigned char *p = data;
    int depth = 0;
    bool quoted = false, escaped = false; /* escaped: the byte after a backslash, in a string */
    size_t i = 0;
    while (i < size) { /* a piece of PZ_ASK_BYTES at a time, asking between pieces */
        if (i > 0 && ask && !ask(ud, i)) return SIZE_MAX;
        size_t end = size - i > PZ_ASK_BYTES ? i + PZ_ASK_BYTES : size;
        for (; i < end; i++) { /* never past end: the escape is carried, so asks fall on the grid */
            unsigned char c = p[i];
            if (escaped) {
                escaped = false; /* the escaped byte is no quote */
            } else if (quoted) {
                if (c == '\\') escaped = true;
                else if (c == '"') quoted = false;
            } else if (c == '"') {
                quoted = true;
            } else if (c == '[' || c == '{') {
                if (++depth > PZ_JSON_MAX_DEPTH) return i;
            } else if (c == ']' || c == '}') {
                depth--; /* (below 0 only in text jansson refuses anyway) */
            }
        }
    }
    return size;
}

static bool scan_ask(void *ud, size_t done) {
    const text_feed *f = ud;
    return pz_json_ask(f->j, done, f->size, "bytes");
}

json_t *pz_json_parse(pz_json *j, const void *data, size_t size) {
    if (!data && size) {
        pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "data is NULL");
        return NULL;
    }
    text_feed f = {j, data ? (const char *)data : "", size, 0, 0};
    size_t deep = pz_json_too_deep(data, size, j->keep_going ? scan_ask : NULL, &f);
    if (deep == SIZE_MAX) return NULL; /* stopped: j->r and the message are set */
    if (deep < size) {
        pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "at byte %llu: arrays and objects nest more than %d deep",
                     (unsigned long long)deep, PZ_JSON_MAX_DEPTH);
        return NULL;
    }
    json_error_t err;
    const int flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL;
    json_t *root;
    if (j->keep_going) {
        root = json_load_callback(feed, &f, flags, &err);
        if (j->r != KILN_OK) { /* stopped */
            json_decref(root);
            return NULL;
        }
    } else {
        root = json_loadb(data ? (const char *)data : "", size, flags, &err);
    }
    if (!root) {
        pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "at line %d column %d (byte %d): %.120s%s", err.line,
                     err.column, err.position, err.text, pz_json_error_hint(&err));
        return NULL;
    }
    if (!json_is_object(root)) {
        pz_json_expect(j, root, false, "an object at the top level");
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- reading ---- */

bool pz_json_plain(const json_t *v) {
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

bool pz_json_integer_in(pz_json *j, const json_t *v, json_int_t lo, json_int_t hi, json_int_t *dest) {
    if (!pz_json_expect(j, v, json_is_integer(v), "an integer")) return false;
    *dest = json_integer_value(v);
    if (*dest < lo || *dest > hi) return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "%lld is out of range", (long long)*dest);
    return true;
}

/* The bits of a float (mantissa 23 bits) or double (52 bits) whose JSON value is the string s:
 * "inf", "-inf", "nan", "-nan" (the quiet NaN of that sign) or "nan(0xM)" / "-nan(0xM)" (M: the
 * whole mantissa field in hex, 0x1 up to its mask, the quiet bit included). 1: written to
 * dest; 0: not one of these (left to the caller); -1: a malformed NaN (refused, named). */
static int nonfinite(pz_json *j, const char *s, int mantissa_bits, uint64_t *dest) {
    uint64_t exponent = mantissa_bits == 23 ? UINT64_C(0xff) << 23 : UINT64_C(0x7ff) << 52;
    uint64_t sign = (uint64_t)1 << (mantissa_bits == 23 ? 31 : 63), mask = ((uint64_t)1 << mantissa_bits) - 1;
    uint64_t quiet = (uint64_t)1 << (mantissa_bits - 1);
    bool negative = *s == '-';
    const char *t = s + negative;
    if (strcmp(t, "inf") == 0) return *dest = (negative ? sign : 0) | exponent, 1;
    if (strcmp(t, "nan") == 0) return *dest = (negative ? sign : 0) | exponent | quiet, 1;
    if (strncmp(t, "nan(", 4) != 0) return 0;
    const char *h = t + 4;
    uint64_t m = 0;
    int digits = 0;
    bool ok = h[0] == '0' && h[1] == 'x';
    for (h += 2; ok && *h && *h != ')'; h++, digits++) {
        int c = *h, d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        ok = d >= 0 && digits < 16;
        m = m << 4 | (uint64_t)(d & 15);
    }
    ok = ok && digits > 0 && h[0] == ')' && h[1] == 0;
    size_t n = strlen(s);
    if (!ok)
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT,
                            "\"%.24s%s\" is not a number (NaNs are \"nan\", \"-nan\" or \"nan(0x\" hex digits \")\")",
                            s, n > 24 ? "..." : ""), -1;
    if (m == 0 || m > mask)
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "\"%s\" is not a %s NaN (its payload is 0x1 to 0x%llx)", s,
                            mantissa_bits == 23 ? "float" : "double", (unsigned long long)mask), -1;
    *dest = (negative ? sign : 0) | exponent | m;
    return 1;
}

bool pz_json_number(pz_json *j, const json_t *v, double *dest) {
    if (json_is_number(v)) return *dest = json_number_value(v), true;
    uint64_t bits;
    int got = pz_json_plain(v) ? nonfinite(j, json_string_value(v), 52, &bits) : 0;
    if (got > 0) memcpy(dest, &bits, 8);
    return got ? got > 0 : pz_json_expect(j, v, false, "a number");
}

/* A float or double field element: a number, or a non-finite value as its bits (a NaN's
 * payload never passes through a conversion, which would quiet or shorten it). */
static bool real_element(pz_json *j, const json_t *v, kiln_type type, uint8_t *p) {
    if (pz_json_plain(v)) {
        uint64_t bits;
        int got = nonfinite(j, json_string_value(v), type == KILN_TYPE_FLOAT ? 23 : 52, &bits);
        if (got < 0) return false;
        if (got > 0) {
            uint32_t b32 = (uint32_t)bits;
            if (type == KILN_TYPE_FLOAT) memcpy(p, &b32, 4);
            else memcpy(p, &bits, 8);
            return true;
        }
    }
    if (!pz_json_expect(j, v, json_is_number(v), "a number")) return false;
    double d = json_number_value(v);
    if (type == KILN_TYPE_DOUBLE) return memcpy(p, &d, 8), true;
    float f = (float)d;
    char num[32];
    if (!isfinite(f))
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "%s is out of range for a float",
                            kl_number_text(num, sizeof num, "%g", d));
    memcpy(p, &f, 4);
    return true;
}

static bool entity_number(pz_json *j, const json_t *v, uint8_t *p) {
    uint64_t stored = 0;
    if (!json_is_null(v)) {
        json_int_t n;
        if (!pz_json_expect(j, v, json_is_integer(v), "an entity number (integer) or null")) return false;
        n = json_integer_value(v);
        if (n < 0 || n > j->ref_max)
            return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "entity %lld is not in %s (1..%lld, or null)",
                                (long long)n, j->ref_what, (long long)j->ref_max);
        stored = n && j->ref_map ? (uint64_t)j->ref_map[n] : (uint64_t)n;
    }
    memcpy(p, &stored, 8);
    return true;
}

/* A uint64 as a number or, past INT64_MAX, a string of decimal digits. */
static bool unsigned64(pz_json *j, const json_t *v, uint8_t *p) {
    uint64_t u;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (!pz_json_plain(v) || !*s || *s < '0' || *s > '9') return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "an unsigned integer expected");
        errno = 0;
        u = strtoull(s, &end, 10);
        if (*end || errno == ERANGE)
            return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "an unsigned integer (at most 64 bits) expected");
    } else {
        json_int_t i;
        if (!pz_json_integer_in(j, v, 0, INT64_MAX, &i)) return false;
        u = (uint64_t)i;
    }
    memcpy(p, &u, 8);
    return true;
}

bool pz_json_element(pz_json *j, const json_t *v, kiln_type type, uint8_t *p) {
    json_int_t i;
    switch (type) {
    case KILN_TYPE_BOOL:
        if (!pz_json_expect(j, v, json_is_boolean(v), "a boolean")) return false;
        *p = json_is_true(v);
        return true;
    case KILN_TYPE_INT8: if (!pz_json_integer_in(j, v, INT8_MIN, INT8_MAX, &i)) return false; { int8_t x = (int8_t)i; memcpy(p, &x, 1); } return true;
    case KILN_TYPE_INT16: if (!pz_json_integer_in(j, v, INT16_MIN, INT16_MAX, &i)) return false; { int16_t x = (int16_t)i; memcpy(p, &x, 2); } return true;
    case KILN_TYPE_INT32: if (!pz_json_integer_in(j, v, INT32_MIN, INT32_MAX, &i)) return false; { int32_t x = (int32_t)i; memcpy(p, &x, 4); } return true;
    case KILN_TYPE_INT64: if (!pz_json_integer_in(j, v, INT64_MIN, INT64_MAX, &i)) return false; memcpy(p, &i, 8); return true;
    case KILN_TYPE_UINT8: if (!pz_json_integer_in(j, v, 0, UINT8_MAX, &i)) return false; *p = (uint8_t)i; return true;
    case KILN_TYPE_UINT16: if (!pz_json_integer_in(j, v, 0, UINT16_MAX, &i)) return false; { uint16_t x = (uint16_t)i; memcpy(p, &x, 2); } return true;
    case KILN_TYPE_UINT32: if (!pz_json_integer_in(j, v, 0, UINT32_MAX, &i)) return false; { uint32_t x = (uint32_t)i; memcpy(p, &x, 4); } return true;
    case KILN_TYPE_ENTITY:
        return j->ref_what ? entity_number(j, v, p) : unsigned64(j, v, p); /* a saved handle */
    case KILN_TYPE_UINT64: return unsigned64(j, v, p);
    case KILN_TYPE_FLOAT: case KILN_TYPE_DOUBLE: return real_element(j, v, type, p);
    default: {
        size_t n = kiln_type_size(type) / 4;
        if (!pz_json_expect(j, v, json_is_array(v) && json_array_size(v) == n, "an array of floats of the vector's size"))
            return false;
        for (size_t k = 0; k < n; k++) {
            size_t mark = pz_json_index(j, k);
            bool ok = pz_json_element(j, json_array_get(v, k), KILN_TYPE_FLOAT, p + 4 * k);
            pz_json_pop(j, mark);
            if (!ok) return false;
        }
        return true;
    }
    }
}

static bool field(pz_json *j, const json_t *v, const kiln_field *f, uint8_t *value) {
    uint8_t *p = value + f->offset;
    uint32_t count = f->count ? f->count : 1;
    if (f->type == KILN_TYPE_CHAR) {
        if (!pz_json_expect(j, v, json_is_string(v), "a string")) return false;
        size_t n = json_string_length(v);
        if (n > count) return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "a string of at most %u bytes expected", (unsigned)count);
        memset(p, 0, count); /* NULs inside are kept: the array's bytes after its text are data too */
        memcpy(p, json_string_value(v), n);
        return true;
    }
    if (count == 1) return pz_json_element(j, v, f->type, p);
    if (!pz_json_expect_array(j, v, count)) return false;
    for (uint32_t k = 0; k < count; k++) {
        size_t mark = pz_json_index(j, k);
        bool ok = pz_json_element(j, json_array_get(v, k), f->type, p + k * kiln_type_size(f->type));
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    return true;
}

static bool hex_value(pz_json *j, const json_t *v, uint8_t *dest, size_t size) {
    if (!pz_json_expect(j, v, json_is_string(v), "a hex string (the component has no reflected fields)")) return false;
    const char *s = json_string_value(v);
    if (json_string_length(v) != size * 2)
        return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "a hex string of %zu bytes expected", size);
    for (size_t i = 0; i < size * 2; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "a hex string expected (bad digit at %zu)", i);
        dest[i / 2] = (uint8_t)(dest[i / 2] << 4 | d);
    }
    return true;
}

bool pz_json_read_value(pz_json *j, const json_t *v, const kiln_component_info *info, uint8_t *dest) {
    if (info->size == 0) return pz_json_expect(j, v, json_is_true(v), "true (a tag)");
    if (info->field_count == 0) return hex_value(j, v, dest, info->size);
    if (!pz_json_expect(j, v, json_is_object(v), "an object of fields")) return false;
    const char *key;
    json_t *fv;
    json_object_foreach((json_t *)v, key, fv) {
        const kiln_field *f = NULL;
        for (int32_t k = 0; k < info->field_count && !f; k++)
            if (strcmp(info->fields[k].name, key) == 0) f = &info->fields[k];
        size_t mark = pz_json_key(j, key);
        bool ok = f ? field(j, fv, f, dest)
                    : pz_json_fail(j, KILN_ERR_UNKNOWN_COMPONENT, "component '%s' has no such field", info->name);
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    return true;
}

bool pz_json_read_components(pz_json *j, const json_t *v, pz_tree *tree, pz_node *node) {
    if (!pz_json_expect(j, v, json_is_object(v), "an object of components")) return false;
    const char *key;
    json_t *cv;
    json_object_foreach((json_t *)v, key, cv) {
        size_t mark = pz_json_key(j, key);
        kiln_component id = kiln_component_lookup(j->world, key);
        if (!id && strcmp(key, "Name") == 0 && kiln_name_init(j->world, &id) != KILN_OK) { /* the addon's own */
            pz_json_pop(j, mark);
            return pz_json_fail(j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        kiln_component_info info;
        const char *why = NULL;
        bool ok;
        if (!id) {
            ok = pz_json_fail(j, KILN_ERR_UNKNOWN_COMPONENT, "unknown component (not registered in this world)");
        } else if (kiln_component_info_get(j->world, id, &info), (why = pz_tree_refuses(&info)) != NULL) {
            ok = pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "component '%s' %s", info.name, why);
        } else if (info.owner) { /* checked, left off: what a prefab or scene spawns is its caller's */
            ok = pz_json_read_value(j, cv, &info, NULL);
        } else {
            pz_value *value = pz_node_value(tree, node, &info);
            ok = value ? pz_json_read_value(j, cv, &info, value->bytes)
                       : pz_json_fail(j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    return true;
}

/* ---- writing ---- */

json_t *pz_json_chars(const uint8_t *p, size_t count) {
    while (count && p[count - 1] == 0) count--;
    return json_stringn((const char *)p, count);
}

/* Whether s is UTF-8 as jansson takes it: no overlong form, no surrogate, nothing past U+10FFFF. */
static bool utf8_text(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
                           : c >= 0xF0 && c <= 0xF4 ? 3 : 4;
        if (n == 4) return false;
        uint32_t cp = n ? c & (0x3Fu >> n) : c;
        for (unsigned i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i] & 0x3Fu);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        p += n + 1;
    }
    return true;
}

kiln_result pz_json_names(kiln_world *world, const kiln_component_info *info, bool fields, const char *kind,
                          const char *call) {
    if (!utf8_text(info->name))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s '%.100s' is named in bytes that are not UTF-8 "
                       "(JSON holds nothing else; save in binary)", call, kind, info->name);
    for (int32_t f = 0; fields && f < info->field_count; f++)
        if (!utf8_text(info->fields[f].name))
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s '%s' field '%.100s' is named in bytes that are "
                           "not UTF-8 (JSON holds nothing else; save in binary)", call, kind, info->name,
                           info->fields[f].name);
    return KILN_OK;
}

json_t *pz_json_hex(kiln_world *world, const uint8_t *data, size_t size) {
    static const char digits[] = "0123456789abcdef";
    char *s = kl_alloc(&world->alloc, size * 2 + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < size; i++) s[2 * i] = digits[data[i] >> 4], s[2 * i + 1] = digits[data[i] & 15];
    json_t *j = json_stringn(s, size * 2);
    kl_free(&world->alloc, s, size * 2 + 1);
    return j;
}

/* A float (mantissa_bits 23) or double (52) from its bits: a number when finite, else "inf",
 * "-inf", "nan", "-nan" (the quiet NaN of that sign) or "nan(0xM)" / "-nan(0xM)" with M the
 * whole mantissa field, so every NaN keeps its payload (see nonfinite). */
static json_t *real_bits(uint64_t bits, int mantissa_bits) {
    uint64_t mask = ((uint64_t)1 << mantissa_bits) - 1, m = bits & mask;
    int exponent_bits = mantissa_bits == 23 ? 8 : 11;
    uint64_t exponent = bits >> mantissa_bits & (((uint64_t)1 << exponent_bits) - 1);
    bool negative = bits >> (mantissa_bits + exponent_bits) & 1;
    if (exponent != ((uint64_t)1 << exponent_bits) - 1) {
        if (mantissa_bits == 23) {
            float f;
            uint32_t b32 = (uint32_t)bits;
            memcpy(&f, &b32, 4);
            return json_real(f);
        }
        double d;
        memcpy(&d, &bits, 8);
        return json_real(d);
    }
    if (m == 0) return json_string(negative ? "-inf" : "inf");
    if (m == (uint64_t)1 << (mantissa_bits - 1)) return json_string(negative ? "-nan" : "nan");
    char buf[32];
    snprintf(buf, sizeof buf, "%snan(0x%llx)", negative ? "-" : "", (unsigned long long)m);
    return json_string(buf);
}

static json_t *real_float(const uint8_t *p) {
    uint32_t b;
    memcpy(&b, p, 4);
    return real_bits(b, 23);
}

json_t *pz_json_write_element(kiln_type type, const uint8_t *p, pz_number_fn number, void *ud) {
    switch (type) {
    case KILN_TYPE_BOOL: return json_boolean(*p != 0);
    case KILN_TYPE_INT8: { int8_t v; memcpy(&v, p, 1); return json_integer(v); }
    case KILN_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); return json_integer(v); }
    case KILN_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); return json_integer(v); }
    case KILN_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); return json_integer(v); }
    case KILN_TYPE_UINT8: return json_integer(*p);
    case KILN_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); return json_integer(v); }
    case KILN_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); return json_integer(v); }
    case KILN_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v <= INT64_MAX) return json_integer((json_int_t)v);
        char buf[24];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        return json_string(buf);
    }
    case KILN_TYPE_ENTITY: {
        kiln_entity e;
        memcpy(&e, p, 8);
        assert(number != NULL);
        int64_t n = e ? number(ud, e) : 0;
        return n > 0 ? json_integer(n) : json_null();
    }
    case KILN_TYPE_FLOAT: return real_float(p);
    case KILN_TYPE_DOUBLE: { uint64_t b; memcpy(&b, p, 8); return real_bits(b, 52); }
    default: {
        size_t n = kiln_type_size(type) / 4;
        json_t *a = json_array();
        for (size_t i = 0; i < n && a; i++) {
            if (json_array_append_new(a, real_float(p + 4 * i)) != 0) { /* out of memory: nothing half-written */
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    }
}

json_t *pz_json_write_value(kiln_world *world, const kiln_component_info *info, const uint8_t *value,
                            pz_number_fn number, void *ud, const char **bad_text) {
    if (info->size == 0) return json_true();
    if (info->field_count == 0) return pz_json_hex(world, value, info->size);
    json_t *o = json_object();
    for (int32_t f = 0; f < info->field_count && o; f++) {
        const kiln_field *fd = &info->fields[f];
        uint32_t n = fd->count ? fd->count : 1;
        const uint8_t *p = value + fd->offset;
        json_t *fv;
        if (fd->type == KILN_TYPE_CHAR) {
            fv = pz_json_chars(p, n);
            if (!fv && bad_text) *bad_text = fd->name; /* JSON holds UTF-8 only */
        }
        else if (n == 1) fv = pz_json_write_element(fd->type, p, number, ud);
        else {
            fv = json_array();
            for (uint32_t k = 0; k < n && fv; k++)
                if (json_array_append_new(fv, pz_json_write_element(fd->type, p + k * kiln_type_size(fd->type), number,
                                                                    ud)) != 0) {
                    json_decref(fv);
                    fv = NULL;
                }
        }
        if (!fv || json_object_set_new(o, fd->name, fv) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* ---- files ---- */

kiln_result pz_read_file(kiln_world *world, const char *path, const char *call,
                         const kiln_load_desc *desc, pz_bytes *bytes) {
    if (!path) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: path is NULL", call);
    /* Opened without blocking: opening a pipe no one writes to would wait for good, and a
     * terminal would become the process's own. Then a device or a pipe, which may never end
     * (/dev/zero), is refused: only a file holds a save. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: cannot open %.200s: %s", call, path, strerror(errno));
    struct stat st;
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %.200s is not a regular file", call, path);
    }
    if (desc && desc->max_bytes && (uint64_t)st.st_size > desc->max_bytes) {
        close(fd);
        return kl_fail(world, KILN_ERR_LIMIT, "%s: the %s at %.200s is larger than %llu bytes (%llu bytes)", call,
                       strcmp(call, "kiln_load_file") == 0 ? "save" : "file", path,
                       (unsigned long long)desc->max_bytes, (unsigned long long)st.st_size);
    }
    FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        close(fd);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: cannot open %.200s: %s", call, path, strerror(e));
    }
    uint8_t chunk[1 << 14];
    size_t n;
    uint64_t done = 0, asked = 0, size = (uint64_t)st.st_size;
    /* no further than the size the file had when opened: one that reads on past it (growing
     * while it is read, or a pseudo-file such as /proc/self/pagemap, of size 0 and hundreds of
     * GiB long) might never end either */
    while (done < size && (n = fread(chunk, 1, size - done < sizeof chunk ? (size_t)(size - done) : sizeof chunk, f)) > 0) {
        if (!pz_bytes_write(bytes, chunk, n)) break;
        done += n;
        if (desc && desc->keep_going && done - asked >= PZ_READ_ASK) {
            asked = done;
            if (!desc->keep_going(desc->ud)) {
                fclose(f);
                return kl_fail(world, KILN_ERR_LIMIT, "%s: stopped by the caller after %llu of %llu bytes read",
                               call, (unsigned long long)done, (unsigned long long)st.st_size);
            }
        }
    }
    bool bad = ferror(f) != 0;
    bool more = !bad && !bytes->failed && done == size && fread(chunk, 1, 1, f) == 1;
    fclose(f);
    if (bytes->failed) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    if (bad) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: reading %.200s failed", call, path);
    if (more)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %.200s reads on past its size (%llu bytes): "
                       "it is not a file of fixed size", call, path, (unsigned long long)size);
    return KILN_OK;
}
