/* schema.c: parses C-style component schemas ("float x, y; char tag[16];") into reflected
 * fields laid out by C's rules (natural alignment, size rounded to the largest alignment),
 * so C code can read a Lua-defined component as the matching struct. */
#include <ctype.h>
#include <string.h>

#include "klua.h"

static const struct {
    const char *name;
    kiln_type type;
    size_t align;
} type_names[] = {
    {"bool", KILN_TYPE_BOOL, 1},       {"int8_t", KILN_TYPE_INT8, 1},
    {"int8", KILN_TYPE_INT8, 1},       {"int16_t", KILN_TYPE_INT16, 2},
    {"int16", KILN_TYPE_INT16, 2},     {"int32_t", KILN_TYPE_INT32, 4},
    {"int32", KILN_TYPE_INT32, 4},     {"int", KILN_TYPE_INT32, 4},
    {"int64_t", KILN_TYPE_INT64, 8},   {"int64", KILN_TYPE_INT64, 8},
    {"uint8_t", KILN_TYPE_UINT8, 1},   {"uint8", KILN_TYPE_UINT8, 1},
    {"uint16_t", KILN_TYPE_UINT16, 2}, {"uint16", KILN_TYPE_UINT16, 2},
    {"uint32_t", KILN_TYPE_UINT32, 4}, {"uint32", KILN_TYPE_UINT32, 4},
    {"uint64_t", KILN_TYPE_UINT64, 8}, {"uint64", KILN_TYPE_UINT64, 8},
    {"float", KILN_TYPE_FLOAT, 4},     {"double", KILN_TYPE_DOUBLE, 8},
    {"entity", KILN_TYPE_ENTITY, 8},   {"char", KILN_TYPE_CHAR, 1},
    {"vec2", KILN_TYPE_VEC2, 4},       {"vec3", KILN_TYPE_VEC3, 4},
    {"vec4", KILN_TYPE_VEC4, 4},       {"quat", KILN_TYPE_QUAT, 4},
    {"mat4", KILN_TYPE_MAT4, 4},
};

typedef struct cursor {
    const char *p;
} cursor;

static void skip_space(cursor *c) {
    while (isspace((unsigned char)*c->p)) c->p++;
}

/* Reads an identifier into buf (at most size - 1 bytes); false when none is there. */
static bool read_ident(cursor *c, char *buf, size_t size) {
    skip_space(c);
    const char *s = c->p;
    if (!(isalpha((unsigned char)*s) || *s == '_')) return false;
    size_t n = 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_') n++;
    if (n >= size) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    c->p = s + n;
    return true;
}

static int fail(lua_State *L, const char *schema, const cursor *c, const char *what) {
    lua_pushfstring(L, "%s at position %d of schema \"%s\"", what, (int)(c->p - schema) + 1,
                    schema);
    return -1;
}

int klua_parse_schema(lua_State *L, const char *schema, kiln_field *fields, char *names_buf,
                      size_t names_size, size_t *size, size_t *align) {
    cursor c = {schema};
    size_t offset = 0, max_align = 1, used = 0;
    int n = 0;
    char word[KILN_MAX_NAME + 1];
    for (;;) {
        skip_space(&c);
        if (*c.p == '\0') break;
        if (!read_ident(&c, word, sizeof word)) return fail(L, schema, &c, "expected a type");
        int t = -1;
        for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
            if (strcmp(type_names[i].name, word) == 0) t = (int)i;
        if (t < 0) {
            lua_pushfstring(L, "unknown type '%s' in schema \"%s\"", word, schema);
            return -1;
        }
        for (;;) {
            char name[KILN_MAX_NAME + 1];
            if (!read_ident(&c, name, sizeof name)) return fail(L, schema, &c, "expected a field name");
            uint32_t count = 1;
            skip_space(&c);
            if (*c.p == '[') {
                c.p++;
                skip_space(&c);
                if (!isdigit((unsigned char)*c.p)) return fail(L, schema, &c, "expected an array length");
                unsigned long len = 0;
                while (isdigit((unsigned char)*c.p) && len < 1000000) len = len * 10 + (unsigned long)(*c.p++ - '0');
                skip_space(&c);
                if (*c.p != ']') return fail(L, schema, &c, "expected ']'");
                c.p++;
                if (len == 0 || len > 65536) return fail(L, schema, &c, "array length must be 1 to 65536");
                count = (uint32_t)len;
            } else if (type_names[t].type == KILN_TYPE_CHAR) {
                return fail(L, schema, &c, "char fields need a length, as in char name[16]");
            }
            if (n == KILN_MAX_FIELDS) return fail(L, schema, &c, "too many fields");
            for (int i = 0; i < n; i++)
                if (strcmp(fields[i].name, name) == 0) {
                    lua_pushfstring(L, "field '%s' declared twice in schema \"%s\"", name, schema);
                    return -1;
                }
            size_t a = type_names[t].align;
            size_t len = strlen(name) + 1;
            if (used + len > names_size) return fail(L, schema, &c, "schema too long");
            memcpy(names_buf + used, name, len);
            offset = (offset + a - 1) / a * a;
            fields[n] = (kiln_field){names_buf + used, type_names[t].type, (uint32_t)offset, count};
            used += len;
            offset += kiln_type_size(type_names[t].type) * count;
            if (a > max_align) max_align = a;
            if (offset > (1u << 20)) return fail(L, schema, &c, "component larger than 1 MiB");
            n++;
            skip_space(&c);
            if (*c.p == ',') {
                c.p++;
                continue;
            }
            if (*c.p == ';') {
                c.p++;
                break;
            }
            if (*c.p == '\0') break;
            return fail(L, schema, &c, "expected ',' or ';'");
        }
    }
    *align = max_align;
    *size = (offset + max_align - 1) / max_align * max_align;
    return n;
}
