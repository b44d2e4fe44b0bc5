/* scene_internal.h: what prefabs and scenes share: a flat tree of nodes to spawn, JSON values
 * read into and written from the world's layout with the path of any bad value. */
#ifndef KILN_SCENE_INTERNAL_H
#define KILN_SCENE_INTERNAL_H

#include <jansson.h>

#include "persist_internal.h"

/* In a tree value, an entity field holding 1 .. 2^32-1 names a node of the tree (1-based): no
 * live handle is that small (generations start at 1). 0 is null, anything else is kept. */
#define PZ_NODE_REF_MAX 0xffffffffull

typedef struct pz_value {
    kiln_component id;
    uint32_t size;              /* the component's size when the value was made */
    uint8_t *bytes;             /* the world's layout; NULL for a tag */
} pz_value;

typedef struct pz_node {
    int64_t parent;             /* node index, or -1: a root */
    int32_t count, cap;
    pz_value *values;
} pz_node;

/* Nodes in an order where every parent comes first (prefabs: pre-order). */
typedef struct pz_tree {
    pz_arena *arena;
    int64_t count, cap;
    pz_node *nodes;
} pz_tree;

/* Appends a node (no values) with parent; returns its index or -1 when out of memory. */
KL_HIDDEN int64_t pz_tree_add(pz_tree *tree, int64_t parent);
/* The value of component id on node (added with the component's defaults when missing);
 * NULL when out of memory. */
KL_HIDDEN pz_value *pz_node_value(pz_tree *tree, pz_node *node, const kiln_component_info *info);
/* Copies src's nodes to the end of tree, their node references shifted to where they land and
 * their roots under parent; false when out of memory. */
KL_HIDDEN bool pz_tree_append(kiln_world *world, pz_tree *tree, const pz_tree *src, int64_t parent);
/* Spawns every node (roots under parent when it is not null), links parents, points node
 * references at the new entities and runs check hooks; writes the handles to dest (count).
 * All or nothing: a failure despawns what it spawned. Messages start with call. */
KL_HIDDEN kiln_result pz_tree_spawn(kiln_world *world, const pz_tree *tree, kiln_entity parent,
                                    const char *call, kiln_entity *dest);

/* Reasons a component cannot be in a prefab or a scene (hooks, or Parent which the tree
 * itself expresses); NULL when it can. */
KL_HIDDEN const char *pz_tree_refuses(const kiln_component_info *info);

/* ---- jvalue.c: JSON values of components in the world's layout ---- */
typedef struct pz_json {
    kiln_world *world;
    const char *call;           /* "kiln_prefab_load", "kiln_instantiate", ... */
    kiln_result r;
    int64_t ref_max;            /* entity fields take 1 .. ref_max (or null / 0) */
    const char *ref_what;       /* "the scene", "the prefab" */
    const int64_t *ref_map;     /* number -> what to store (1..ref_max); NULL: the number */
    kiln_load_continue_fn keep_going; /* the caller's (optional): asked while reading */
    void *keep_ud;
    char path[256];
} pz_json;

/* How often a reader with keep_going asks it: every PZ_ASK_BYTES of JSON text parsed (and
 * every PZ_ASK_ITEMS entities or nodes read: persist_internal.h). */
#define PZ_ASK_BYTES ((size_t)64 << 10)
/* Asks j's keep_going (none: true); false, with KILN_ERR_LIMIT "<call>: stopped by the caller
 * after done of total what", when it says stop. */
KL_HIDDEN bool pz_json_ask(pz_json *j, uint64_t done, uint64_t total, const char *what);

/* How deep arrays and objects may nest in any JSON text kiln reads (a save, a prefab, a scene):
 * past the deepest a valid one nests (scene properties 200 deep in the Lua binding, prefabs 64
 * children deep), short of what a small thread stack holds while jansson parses and frees a
 * tree (it recurses per level: 2,048 levels overflowed a 100 KiB stack). */
#define PZ_JSON_MAX_DEPTH 256
/* The byte of data at which its arrays and objects (outside strings) first nest past
 * PZ_JSON_MAX_DEPTH, or size when they never do: checked before jansson parses the text. With
 * ask set, asks it after every PZ_ASK_BYTES scanned (done: the bytes scanned), as the parse
 * asks keep_going, and returns SIZE_MAX as soon as it answers false. */
typedef bool (*pz_scan_ask_fn)(void *ud, size_t done);
KL_HIDDEN size_t pz_json_too_deep(const void *data, size_t size, pz_scan_ask_fn ask, void *ud);

KL_HIDDEN bool pz_json_fail(pz_json *j, kiln_result code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
KL_HIDDEN size_t pz_json_key(pz_json *j, const char *key);
KL_HIDDEN size_t pz_json_index(pz_json *j, size_t i);
KL_HIDDEN void pz_json_pop(pz_json *j, size_t mark);
KL_HIDDEN bool pz_json_expect(pz_json *j, const json_t *v, bool ok, const char *what);
/* An array of exactly count elements at v, else fails saying both counts (or what v is). */
KL_HIDDEN bool pz_json_expect_array(pz_json *j, const json_t *v, uint32_t count);
/* True for a string without NUL bytes (the parser lets \u0000 through for char arrays; a
 * string read as C text, a name or a number, must not hold one: it would read as its prefix). */
KL_HIDDEN bool pz_json_plain(const json_t *v);
/* Fails naming the first key of object v that is not in keys (NULL-terminated). */
/* One value of type from v into p, the path naming it on failure: the integer kinds within
 * their range, floats and doubles (also "inf", "-inf", "nan", "-nan" and "nan(0xM)", see
 * kiln_persist.h), uint64 as a number or a decimal
 * string, vectors as arrays of floats; an entity as a number in 1..ref_max (or null) mapped
 * through ref_map, or, when ref_what is NULL, as a saved handle like a uint64. */
KL_HIDDEN bool pz_json_element(pz_json *j, const json_t *v, kiln_type type, uint8_t *p);
KL_HIDDEN bool pz_json_integer_in(pz_json *j, const json_t *v, json_int_t lo, json_int_t hi, json_int_t *dest);
/* A number, or a non-finite one as a string: "inf", "-inf", "nan", "-nan", "nan(0xM)". */
KL_HIDDEN bool pz_json_number(pz_json *j, const json_t *v, double *dest);
KL_HIDDEN bool pz_json_keys(pz_json *j, const json_t *v, const char *const *keys);
/* What a parse error of jansson's adds to its own text: for a number too big for an int64 (a
 * uint64 past INT64_MAX written by hand as a number), how a uint64 field takes one; else "". */
KL_HIDDEN const char *pz_json_error_hint(const json_error_t *err);
/* Parses text (syntax errors say line, column and byte); NULL with the error set. */
KL_HIDDEN json_t *pz_json_parse(pz_json *j, const void *data, size_t size);
/* Reads the value of a component (an object of fields, true for a tag, a hex string for a
 * component without reflected fields) over dest, which holds the value to start from. */
KL_HIDDEN bool pz_json_read_value(pz_json *j, const json_t *v, const kiln_component_info *info,
                                  uint8_t *dest);
/* Reads an object of components into node: each known to the world, none refused. */
KL_HIDDEN bool pz_json_read_components(pz_json *j, const json_t *v, pz_tree *tree, pz_node *node);
/* Writes a value as JSON; entity fields through number (a handle -> its number, 0: null).
 * NULL when out of memory, or (bad_text set to the field's name) for a char array that is not
 * UTF-8. */
typedef int64_t (*pz_number_fn)(void *ud, kiln_entity e);
KL_HIDDEN json_t *pz_json_write_value(kiln_world *world, const kiln_component_info *info,
                                      const uint8_t *value, pz_number_fn number, void *ud,
                                      const char **bad_text);
/* One element of a field as JSON: a scalar, or a vector type as an array of floats (NaN and
 * infinities as strings, every NaN with its sign and payload); an entity through number, which only
 * entity elements need. NULL when out of memory. */
KL_HIDDEN json_t *pz_json_write_element(kiln_type type, const uint8_t *p, pz_number_fn number, void *ud);
/* A char array of count bytes at p as a JSON string: every byte up to the last non-NUL one
 * (NULs inside kept, as \u0000; the trailing ones read back as the zeros they were). NULL
 * when those bytes are not UTF-8 (or out of memory). */
KL_HIDDEN json_t *pz_json_chars(const uint8_t *p, size_t count);
/* KILN_OK when the name of info (kind: "component" or "resource") and, with fields, its
 * fields' names are UTF-8, which is all JSON text may be; else fails naming call and the name
 * ("kiln_save: component 'X' field 'Y' is named in bytes that are not UTF-8 ..."). */
KL_HIDDEN kiln_result pz_json_names(kiln_world *world, const kiln_component_info *info, bool fields,
                                    const char *kind, const char *call);
/* size bytes as a string of lowercase hex digits (a value without fields, a codec's bytes). */
KL_HIDDEN json_t *pz_json_hex(kiln_world *world, const uint8_t *data, size_t size);

/* Reads the whole file at path into bytes (on the world's allocator); fails naming call. With a
 * desc whose keep_going is set, asks it after every PZ_READ_ASK bytes read (KILN_ERR_LIMIT
 * when it answers false); a file larger than desc->max_bytes (when set) is refused unread. */
#define PZ_READ_ASK ((uint64_t)1 << 20)
KL_HIDDEN kiln_result pz_read_file(kiln_world *world, const char *path, const char *call,
                                   const kiln_load_desc *desc, pz_bytes *bytes);

/* prefab.c: the tree of a prefab made for world (NULL when it was made for another). */
KL_HIDDEN const pz_tree *pz_prefab_tree(const kiln_prefab *prefab, const kiln_world *world);

#endif
