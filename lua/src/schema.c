/* schema.c: parses C-style component schemas ("float x, y; char tag[16];") into reflected
 * fields laid out by C's rules (natural alignment, size rounded to the largest alignment),
 * so C code can read a Lua-defined component as the matching struct; and the per-world schema
 * cache the hot methods read (a component's description and its field names as ready keys). */
#include <string.h>

#include "kiln_persist.h"
#include "klua.h"
#include "refs.h"

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

/* The characters of C's own syntax, never the C locale's: <ctype.h> follows LC_CTYPE, and in
 * a host that called setlocale(LC_ALL, "") with a Latin-1 locale, isalpha(0xE4) and
 * isspace(0xA0) are true, so a schema would be accepted on one player's machine (with a
 * field name that is no C name nor UTF-8) and refused on the next. */
static bool ascii_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}
static bool ascii_digit(char ch) { return ch >= '0' && ch <= '9'; }
static bool ascii_name_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }

static void skip_space(cursor *c) {
    while (ascii_space(*c->p)) c->p++;
}

/* Reads an identifier into buf (at most size - 1 bytes); false when none is there. */
static bool read_ident(cursor *c, char *buf, size_t size) {
    skip_space(c);
    const char *s = c->p;
    if (!ascii_name_start(*s)) return false;
    size_t n = 0;
    while (ascii_name_start(s[n]) || ascii_digit(s[n])) n++;
    if (n >= size) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    c->p = s + n;
    return true;
}

/* Pushes "what at position N of schema "..."", quoting at most KLUA_QUOTE_MAX bytes of the
 * schema from a little before the position, so a huge schema gives a short message. */
static int fail(lua_State *L, const char *schema, const cursor *c, const char *what) {
    size_t pos = (size_t)(c->p - schema), len = strlen(schema);
    size_t from = pos > KLUA_QUOTE_MAX / 2 ? pos - KLUA_QUOTE_MAX / 2 : 0;
    const char *text = klua_quote(L, schema + from, len - from);
    lua_pushfstring(L, "%s at position %d of schema \"%s%s\"", what, (int)pos + 1,
                    from ? "..." : "", text);
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
        if (!read_ident(&c, word, sizeof word)) /* it stopped at the name's start when too long */
            return fail(L, schema, &c,
                        ascii_name_start(*c.p) ? "type name too long (1 to 63 bytes)" : "expected a type");
        int t = -1;
        for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
            if (strcmp(type_names[i].name, word) == 0) t = (int)i;
        if (t < 0) {
            return fail(L, schema, &c, lua_pushfstring(L, "unknown type '%s'", word));
        }
        for (;;) {
            char name[KILN_MAX_NAME + 1];
            if (!read_ident(&c, name, sizeof name)) /* it stopped at the name's start when too long */
                return fail(L, schema, &c,
                            ascii_name_start(*c.p) ? "field name too long (1 to 63 bytes)" : "expected a field name");
            uint32_t count = 1;
            skip_space(&c);
            if (*c.p == '[') {
                c.p++;
                skip_space(&c);
                if (!ascii_digit(*c.p)) return fail(L, schema, &c, "expected an array length");
                unsigned long len = 0; /* every digit read, the value held at 1000000 (past any length) */
                for (; ascii_digit(*c.p); c.p++)
                    if (len < 1000000) len = len * 10 + (unsigned long)(*c.p - '0');
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
                    return fail(L, schema, &c, lua_pushfstring(L, "field '%s' declared twice", name));
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

/* Registers from a schema string (or nil: a tag, "lua": Lua values) under name; used for
 * components and event types. Returns the id. */
/* A component with a layout named like one of the world's Lua resources would hide it
 * (world:resource reads such a name through the layout): refused, the resource kept. */
static void refuse_hiding(lua_State *L, const char *name, const char *fname) {
    int top = lua_gettop(L);
    bool held = false;
    if (klua_push_state(L, 1, KLUA_STATE_RESOURCES)) {
        lua_pushstring(L, name);
        held = lua_rawget(L, -2) != LUA_TNIL;
    }
    lua_settop(L, top);
    if (held)
        klua_fail(L, fname, "'%s' names a Lua resource of this world, which a component of that name would hide; "
                  "remove the resource first (world:resource(name, nil))", klua_quote(L, name, strlen(name)));
}

/* kiln's own components, which world:name and world:seed register on first use. A mod
 * declaring one the world does not have yet registers kiln's first, so that another layout
 * fails at the declaration instead of taking the name from the host for good (its
 * world:seed, world:random and world:name would raise ever after, the mod unloaded or not).
 * The host's scripts may define such a name as their own (another layout); world:name or
 * world:seed then raise naming the layout. Name and RandomState carry check hooks no schema
 * gives: the host declaring the generator's layout first registers kiln's too, so RandomState
 * refuses all zero whoever declared it; for a mod, the schema of Name's layout declares
 * kiln's own (true, *id set). */
static bool kilns_own(lua_State *L, klua_world *kw, const char *name, const kiln_component_desc *d,
                      const char *fname, uint32_t *id) {
    bool exists = kiln_component_lookup(kw->world, name) != 0;
    bool seed = strcmp(name, "RandomSeed") == 0;
    if (seed || strcmp(name, "RandomState") == 0) {
        bool generators = d->size == (seed ? 8u : 32u) && d->align == 8 && d->field_count == 1 && !d->destroy &&
                          d->fields[0].type == KILN_TYPE_UINT64 &&
                          (d->fields[0].count ? d->fields[0].count : 1) == (seed ? 1 : 4) &&
                          strcmp(d->fields[0].name, seed ? "seed" : "s") == 0;
        if (!exists && (kw->host || generators) && kiln_random_init(kw->world) != KILN_OK)
            klua_fail_world(L, kw->world, fname);
        if (!kw->host) return false; /* the register below finds kiln's, or refuses another layout */
        kiln_component_info info;
        kiln_component_info_get(kw->world, kiln_component_lookup(kw->world, name), &info);
        if (info.size != (seed ? 8u : 32u) || info.field_count != 1 || info.fields[0].type != KILN_TYPE_UINT64 ||
            strcmp(info.fields[0].name, seed ? "seed" : "s") != 0)
            return false; /* the host's own: the usual rules */
        bool same = d->size == info.size && d->align == info.align && d->field_count == 1 && !d->destroy &&
                    d->fields[0].type == KILN_TYPE_UINT64 &&
                    (d->fields[0].count ? d->fields[0].count : 1) == (info.fields[0].count ? info.fields[0].count : 1) &&
                    strcmp(d->fields[0].name, info.fields[0].name) == 0;
        if (!same)
            klua_fail(L, fname, "'%s' is kiln's own component (the generator of world:seed and world:random); "
                      "declare it as \"%s\" or leave it to world:seed", name, seed ? "uint64_t seed;" : "uint64_t s[4];");
        return false; /* the register below finds it */
    }
    if (!kw->host || strcmp(name, "Name") != 0) return false;
    bool same = d->size == sizeof(kiln_name) && d->field_count == 1 && !d->destroy &&
                d->fields[0].type == KILN_TYPE_CHAR && d->fields[0].count == KILN_NAME_MAX + 1 &&
                strcmp(d->fields[0].name, "text") == 0;
    if (!same && exists) return false; /* the host's own Name: the usual rules */
    if (!same)
        klua_fail(L, fname, "'Name' is kiln's own component (the names of world:name); declare it as "
                  "\"char text[%d];\" or leave it to world:name", KILN_NAME_MAX + 1);
    if (kiln_name_init(kw->world, id) != KILN_OK) klua_fail_world(L, kw->world, fname);
    return true;
}

/* A type C registered may be aligned more strictly than its fields need (the transform addon's
 * LocalTransform at 8 and WorldTransform at 16, or any C type whose align was left 0, which
 * takes the size's): its schema, as world:schema prints it, declares it all the same (it was
 * refused as "a different layout"), so the declaration takes the alignment registered, which
 * the values it describes already have. */
static void registered_alignment(kiln_world *world, const char *name, bool event, kiln_component_desc *d) {
    kiln_component_info info = {0};
    if (event) kiln_event_info_get(world, kiln_event_lookup(world, name), &info);
    else kiln_component_info_get(world, kiln_component_lookup(world, name), &info);
    if (d->size && info.size == d->size && info.align > d->align) d->align = info.align;
}

uint32_t klua_define(lua_State *L, klua_world *kw, bool event, const char *fname) {
    if (lua_type(L, 2) != LUA_TSTRING) klua_typeerror(L, 2, fname, "name");
    size_t name_len;
    const char *name = lua_tolstring(L, 2, &name_len);
    if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TSTRING) klua_typeerror(L, 3, fname, "schema string");
    size_t schema_len = 0;
    const char *schema = lua_isnoneornil(L, 3) ? "" : lua_tolstring(L, 3, &schema_len);
    /* both are read (and the schema parsed) in C at every call: a budget pays by their bytes
     * (a schema padded to 8 MB, declared again in a loop, held a mod's host 3 times its limit) */
    klua_budget_charge(L, (double)(name_len + schema_len) / KLUA_COST_BYTES_PER_STEP, fname);
    if (strlen(name) != name_len) klua_argerror(L, 2, fname, "name contains a zero byte");
    if (strlen(schema) != schema_len) klua_argerror(L, 3, fname, "schema contains a zero byte");
    kiln_field fields[KILN_MAX_FIELDS];
    char names[KILN_MAX_FIELDS * (KILN_MAX_NAME + 1)];
    kiln_component_desc d = {.name = name};
    bool lua_valued = strcmp(schema, "lua") == 0;
    if (kw->host && lua_valued)
        klua_argerror(L, 3, fname, "a mod cannot define Lua-valued components (each mod has its own Lua state); give %s a C schema",
                      klua_quote(L, name, strlen(name)));
    if (kw->host && strncmp(name, "kiln.", 5) == 0)
        klua_argerror(L, 2, fname, "names starting 'kiln.' are kiln's own");
    /* a mod manager tags a mod's entities with it, and its unload despawns them all */
    if (klua_is_mod_tag_name(name))
        klua_argerror(L, 2, fname, "names starting 'kiln.mod.' tag the entities of mods (an unload despawns them)");
    if (lua_valued) {
        if (event) klua_argerror(L, 3, fname, "event %s cannot hold Lua values; give it a C schema", klua_quote(L, name, strlen(name)));
        d.size = sizeof(int32_t);
        d.destroy = klua_value_hook;
        d.hook_ctx = kw->shared;
    } else {
        size_t size, align;
        int n = klua_parse_schema(L, schema, fields, names, sizeof names, &size, &align);
        if (n < 0) {
            const char *why = lua_tostring(L, -1);
            klua_argerror(L, 3, fname, "%s: %s", klua_quote(L, name, strlen(name)), why);
        }
        d.size = size;
        d.align = size ? align : 0;
        d.fields = fields;
        d.field_count = n;
        registered_alignment(kw->world, name, event, &d);
    }
    uint32_t id = 0;
    kiln_result r;
    bool existed = event ? kiln_event_lookup(kw->world, name).id != 0 : kiln_component_lookup(kw->world, name) != 0;
    if (!event && !lua_valued && !existed) refuse_hiding(L, name, fname); /* before kilns_own registers */
    bool own = !event && kilns_own(L, kw, name, &d, fname, &id);
    if (!existed && !event) existed = kiln_component_lookup(kw->world, name) != 0; /* kiln's, registered first */
    if (kw->mod_hooks) kw->mod_hooks->before_declare(L, kw, name, event, existed);
    if (own) {
        r = KILN_OK;
    } else if (event) {
        kiln_event_type type = {0};
        r = kiln_event_register(kw->world, &d, &type);
        id = type.id;
    } else {
        r = kiln_component_register(kw->world, &d, &id);
    }
    if (r != KILN_OK && kw->mod_hooks && existed) {
        /* the same name with another schema: say whose it is */
        char owner[KILN_MAX_NAME + 16], self[KILN_MAX_NAME + 16];
        uint32_t other = event ? kiln_event_lookup(kw->world, name).id : kiln_component_lookup(kw->world, name);
        const char *why = strstr(kiln_world_error(kw->world), " hooks ("); /* the core's: what differs */
        klua_fail(L, fname, "%s '%s' is defined by %s with another schema; %s cannot redefine it%s",
                  event ? "event type" : "component", klua_quote(L, name, strlen(name)),
                  kw->mod_hooks->owner(kw, other, event, owner, sizeof owner),
                  kw->mod_hooks->owner(kw, 0, event, self, sizeof self), why ? why + 6 : "");
    }
    if (r != KILN_OK) klua_fail_world(L, kw->world, fname);
    if (lua_valued) klua_mark_lua_valued(L, kw, id);
    /* the host's claim on a component a mod may have registered first (mods.c keeps it) */
    if (!kw->host && existed && !event) klua_mark_host_declared(L, kw, id);
    if (kw->mod_hooks) kw->mod_hooks->declared(L, kw, id, event, existed);
    return id;
}

/* ---- the schema cache ----------------------------------------------------------------------
 * Per world and component: its description, copied once, and its field names as interned
 * strings in the array part of the world's names table (whose other keys are all strings), so
 * world:get sets a field with a raw set of a ready key and world:spawn knows a field by the
 * address of its name. The strings live as long as the names table, i.e. the world. */

/* Grows a Lua-allocated array of elem-sized items to hold at least need (new ones zeroed). */
static void *grow(lua_State *L, void *p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return p;
    int32_t ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    uint8_t *q = fa(ud, p, (size_t)*cap * elem, (size_t)ncap * elem);
    if (!q) klua_no_memory(L);
    memset(q + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *cap = ncap;
    return q;
}

const klua_comp *klua_comp_get(lua_State *L, klua_world *kw, kiln_component c) {
    const klua_comp *ready = klua_comp_ready(kw, c);
    if (ready) return ready;
    kiln_component_info info;
    if (!kiln_component_info_get(kw->world, c, &info)) luaL_error(L, "kiln: unknown component #%d", (int)c);
    int32_t cap = kw->comps_cap;
    kw->comps = grow(L, kw->comps, &cap, (int32_t)c + 1, sizeof *kw->comps);
    kw->comps_cap = cap;
    cap = kw->keys_cap;
    int32_t key0 = kw->keys_count ? kw->keys_count : 1; /* slot 0 stays unused */
    kw->key_ptrs = grow(L, kw->key_ptrs, &cap, key0 + info.field_count + 1, sizeof *kw->key_ptrs);
    kw->keys_cap = cap;
    /* The slots are reserved first: a finalizer run by a push below may make another entry
     * (or close the world, which frees the cache). */
    kw->keys_count = key0 + info.field_count;
    if (klua_getref(L, LUA_REGISTRYINDEX, kw->names_ref) != LUA_TTABLE) klua_names_changed(L);
    bool floats = true, links = false;
    for (int32_t i = 0; i < info.field_count; i++) {
        const kiln_field *f = &info.fields[i];
        floats = floats && f->type == KILN_TYPE_FLOAT && f->count == 1;
        links = links || f->type == KILN_TYPE_ENTITY;
        lua_pushstring(L, f->name);
        if (kw->closed) luaL_error(L, "attempt to use a closed world");
        kw->key_ptrs[key0 + i] = lua_tostring(L, -1);
        lua_rawseti(L, -2, key0 + i);
    }
    lua_pop(L, 1);
    if (kw->comps[c]) return kw->comps[c]; /* a finalizer made it meanwhile */
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    klua_comp *cc = fa(ud, NULL, 0, sizeof *cc);
    if (!cc) klua_no_memory(L);
    cc->info = info;
    cc->key0 = key0;
    cc->floats = floats;
    cc->links = links;
    kw->comps[c] = cc;
    return cc;
}

const kiln_field *klua_comp_field(lua_State *L, const klua_world *kw, const klua_comp *cc, int idx) {
    size_t len;
    const char *name = lua_tolstring(L, idx, &len);
    for (int32_t i = 0; i < cc->info.field_count; i++)
        if (kw->key_ptrs[cc->key0 + i] == name) return &cc->info.fields[i];
    /* another string of the same bytes: a long one (not interned), or one with a zero byte */
    return len <= KILN_MAX_NAME && strlen(name) == len ? klua_find_field(&cc->info, name) : NULL;
}

const kiln_component *klua_links(lua_State *L, klua_world *kw, int32_t *count) {
    int64_t known = kiln_component_count(kw->world);
    while ((int64_t)kw->links_scanned < known) {
        kiln_component c = kw->links_scanned + 1;
        kiln_component_info info;
        bool links = false;
        if (c != kw->shared_type && kiln_component_info_get(kw->world, c, &info))
            for (int32_t i = 0; i < info.field_count && !links; i++)
                links = info.fields[i].type == KILN_TYPE_ENTITY;
        if (links) {
            int32_t cap = kw->link_cap;
            kw->link_ids = grow(L, kw->link_ids, &cap, kw->link_count + 1, sizeof *kw->link_ids);
            kw->link_cap = cap;
            kw->link_ids[kw->link_count++] = c;
        }
        kw->links_scanned = c; /* after the growth, which may raise: c is looked at again */
    }
    *count = kw->link_count;
    return kw->link_ids;
}

void klua_comp_free(lua_State *L, klua_world *kw) {
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    for (int32_t i = 0; i < kw->comps_cap; i++)
        if (kw->comps[i]) fa(ud, kw->comps[i], sizeof *kw->comps[i], 0);
    if (kw->comps) fa(ud, kw->comps, (size_t)kw->comps_cap * sizeof *kw->comps, 0);
    if (kw->key_ptrs) fa(ud, kw->key_ptrs, (size_t)kw->keys_cap * sizeof *kw->key_ptrs, 0);
    if (kw->link_ids) fa(ud, kw->link_ids, (size_t)kw->link_cap * sizeof *kw->link_ids, 0);
    kw->link_ids = NULL;
    kw->link_count = kw->link_cap = 0;
    kw->links_scanned = 0;
    kw->comps = NULL;
    kw->key_ptrs = NULL;
    kw->comps_cap = kw->keys_cap = kw->keys_count = 0;
}
