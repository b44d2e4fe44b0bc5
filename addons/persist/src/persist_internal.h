/* persist_internal.h: what the persistence addon's files share: an arena, a buffered writer,
 * the save plan (what a save holds) and the staged document both loaders parse into. */
#ifndef KILN_PERSIST_INTERNAL_H
#define KILN_PERSIST_INTERNAL_H

#include "kiln_persist.h"

/* Core internals (addons are built with -Icore/src): archetypes, records, the allocator. */
#include "archetype.h"
#include "world.h"

#define PZ_MAGIC "KILNSAVE"
#define PZ_MAGIC_SIZE 8
#define PZ_MAX_COUNT ((int64_t)1 << 31) /* schemas, groups, entities per group, resources */

/* ---- persist.c ---- */
/* What every entry point that changes or copies the world checks first: KILN_OK, else
 * KILN_ERR_INVALID_ARGUMENT naming call when the world is deferred or iterating, or when call
 * comes from a component's destroy or move hook mid-change (kl_in_hook: the change holds rows
 * this call would move, or an entity sits in two rows a copy would take twice). */
KL_HIDDEN kiln_result pz_check_idle(kiln_world *world, const char *call);
/* Its first half, for the calls that only read the world (kiln_export, the hashes), which may
 * run deferred but not mid-change: an entity moving sits in two rows, one half written. Both
 * fail while a schedule runs a stage of systems that are not exclusive, on any thread: the
 * call reads every column while systems beside it may write them. */
KL_HIDDEN kiln_result pz_check_readable(kiln_world *world, const char *call);
/* A call that walks the rows while it calls out (write, progress, a codec) holds the world as a
 * loop does from pz_hold to pz_release: it counts as iterating, so a callback's spawn, despawn,
 * add, remove or set is queued and lands at pz_release (a callback cannot move the rows being
 * read); pz_release returns r, else how the landing went (named call). */
KL_HIDDEN void pz_hold(kiln_world *world);
KL_HIDDEN kiln_result pz_release(kiln_world *world, const char *call, kiln_result r);
/* KILN_ERR_INVALID_ARGUMENT for the resource a save planned and a callback removed since. */
KL_HIDDEN kiln_result pz_resource_gone(kiln_world *world, const char *name);

/* ---- arena.c: an arena on the world's allocator, and a buffered writer ---- */
typedef struct pz_chunk pz_chunk;
typedef struct pz_arena {
    kl_allocator *alloc;
    pz_chunk *chunks;
} pz_arena;

/* size zeroed bytes, 16-byte aligned, freed with the arena; NULL when out of memory. */
KL_HIDDEN void *pz_alloc(pz_arena *arena, size_t size);
/* pz_alloc without the zeroing, for blocks the caller fills whole. */
KL_HIDDEN void *pz_alloc_raw(pz_arena *arena, size_t size);
KL_HIDDEN void pz_arena_free(pz_arena *arena);

typedef struct pz_out {
    kiln_write_fn write;
    void *ud;
    bool failed;
    size_t used;
    uint64_t offset;            /* bytes put so far */
    uint8_t buf[1 << 16];
} pz_out;

KL_HIDDEN void pz_put(pz_out *out, const void *data, size_t size);
KL_HIDDEN bool pz_flush(pz_out *out);

/* Reports units of a save's work to desc->progress: KILN_ERR_LIMIT when it stops the save. */
static inline kiln_result pz_progress(kiln_world *world, const kiln_save_desc *desc, int64_t units) {
    if (!desc->progress || desc->progress(desc->progress_ud, units)) return KILN_OK;
    return kl_fail(world, KILN_ERR_LIMIT, "kiln_save: stopped by desc.progress");
}

/* A growable byte buffer on the world's allocator. */
typedef struct pz_bytes {
    kl_allocator *alloc;
    uint8_t *data;
    size_t size, cap;
    bool failed;
} pz_bytes;
KL_HIDDEN bool pz_bytes_write(void *ud, const void *data, size_t size); /* a kiln_write_fn */
KL_HIDDEN void pz_bytes_free(pz_bytes *b);
/* size bytes of b's storage (its contents dropped), or NULL when out of memory. */
KL_HIDDEN uint8_t *pz_scratch(pz_bytes *b, size_t size);

/* ---- plan.c: what a save holds, in canonical order ---- */
typedef struct pz_plan {
    pz_arena arena;
    int32_t count;               /* schemas saved, sorted by name */
    kiln_component *order;       /* schema index -> component */
    kiln_component_info *info;   /* schema index -> its description */
    bool *codec;                 /* schema index -> saved through the codec (has hooks) */
    uint32_t *index_of;          /* component id -> schema index + 1, or 0 (not saved) */
    int32_t group_count;
    kl_archetype **groups;       /* non-empty archetypes, by id */
    int32_t *group_types;        /* per group: schema indices of its saved types, ascending */
    int32_t *group_type_count;
    int32_t max_types;
    int32_t resource_count;
    int32_t *resources;          /* schema indices of set resources, ascending */
} pz_plan;

/* Builds the plan of world for desc; fails (world error set, naming call) on out of memory, or
 * when a component with hooks must be saved and desc has no codec. */
KL_HIDDEN kiln_result pz_plan_build(kiln_world *world, const kiln_save_desc *desc, pz_plan *plan,
                                    const char *call);
KL_HIDDEN void pz_plan_free(pz_plan *plan);
/* Runs the codec on one value into bytes (reset first); fails naming entity and component. */
KL_HIDDEN kiln_result pz_encode(kiln_world *world, const kiln_save_desc *desc, kiln_component c,
                                kiln_entity e, const void *value, pz_bytes *bytes,
                                const char *call);

/* True when info has a field of type entity. */
KL_HIDDEN bool pz_has_entity_fields(const kiln_component_info *info);
/* Writes null over the entity fields of value that name no live entity (saves hold only live
 * entities, so a reference to another would dangle). */
KL_HIDDEN void pz_null_dead(const kiln_world *world, const kiln_component_info *info, uint8_t *value);

/* ---- live.c: which references name live entities, column by column ---- */
typedef struct pz_live {
    const kiln_world *world;
    kl_record *const *pages;
    kl_archetype *const *archetypes;
    uint32_t slots;
    kiln_entity *handles;  /* by slot: its live handle, or null (and null past the end); or
                              NULL: the records answer */
    uint8_t *ascending;    /* with the table: per archetype (by id), 1 when its rows are in
                              ascending slot order (found on the same sweep); else NULL */
    kl_allocator *alloc;
    size_t bytes;
} pz_live;

/* Prepares for about references look-ups (a table of live generations when they are many). */
KL_HIDDEN void pz_live_open(pz_live *live, const kiln_world *world, int64_t references);
KL_HIDDEN void pz_live_close(pz_live *live);
/* True when every entity field of rows values stride bytes apart is null or live. */
KL_HIDDEN bool pz_live_rows(const pz_live *live, const kiln_component_info *info,
                            const uint8_t *base, size_t stride, size_t rows);
/* Writes null over the entity fields of those rows that name no live entity. */
KL_HIDDEN void pz_null_dead_rows(const pz_live *live, const kiln_component_info *info,
                                 uint8_t *base, size_t stride, size_t rows);
/* Writes null over those of the n references 8 bytes apart from p that name no live entity. */
KL_HIDDEN void pz_null_dead_refs(const pz_live *live, uint8_t *p, size_t n);
/* Entity references in one value of info (entity fields, arrays counted whole). */
KL_HIDDEN int64_t pz_entity_slots(const kiln_component_info *info);

/* ---- the staged document both loaders fill ---- */
typedef struct pz_field {
    const char *name;
    kiln_type type;
    uint32_t count;             /* 1 and up */
    uint32_t offset;            /* in the file's layout */
    const kiln_field *target;   /* the world's field of that name, or NULL (skipped) */
} pz_field;

typedef struct pz_blob {
    const uint8_t *data;
    uint32_t size;
} pz_blob;

typedef struct pz_schema {
    const char *name;
    uint32_t size;              /* bytes of a value in the file's layout (0: a tag) */
    bool codec;                 /* values are codec blobs */
    int32_t field_count;
    pz_field *fields;
    /* resolved against the world */
    kiln_component id;          /* 0: skipped (or pending) */
    bool pending;               /* an addon component the world lacks, registered late (stage.c) */
    kiln_component_info info;
    bool same;                  /* the file's layout is the world's: values copy as they are */
    uint64_t missing;           /* bit f: the world's field f is not in the file and takes the
                                   component's defaults (0 when it has none) */
} pz_schema;

typedef struct pz_group {
    int32_t type_count;
    uint32_t *types;            /* schema indices */
    int64_t count;
    const kiln_entity *handles; /* count saved handles (in the input when it is aligned) */
    const uint8_t **values;     /* per type: count values of the schema's size (plain) */
    pz_blob **blobs;            /* per type: count blobs (codec) */
    const kiln_entity *spawned; /* count new handles, during commit */
} pz_group;

typedef struct pz_resource {
    uint32_t schema;
    const uint8_t *value;       /* plain */
    pz_blob blob;               /* codec */
    uint64_t omitted;           /* JSON: bit f, the value leaves out the schema's field f */
} pz_resource;

/* A JSON value that leaves out fields of its schema (a hand-edited save): they take the
 * component's defaults, as the fields the schema lacks do. */
typedef struct pz_omitted {
    uint32_t group;
    int32_t type;
    int64_t row;
    uint64_t fields;            /* bit f: the schema's field f */
} pz_omitted;

typedef struct pz_doc {
    pz_arena arena;
    kiln_tick tick;
    uint32_t schema_count;
    pz_schema *schemas;
    uint32_t group_count;
    pz_group *groups;
    uint32_t resource_count;
    pz_resource *resources;
    int64_t entity_count;
    uint32_t slots;             /* with has_slots: every saved handle's index is below it */
    bool has_slots;             /* binary version 2 (else the loader finds the highest index) */
    /* with has_free (binary version 4, JSON 2): the free list, the handles the next spawns
     * get in order (each index below slots); a slot neither saved nor on it is retired */
    const kiln_entity *free;
    uint32_t free_count;
    bool has_free;
    pz_blob host;
    bool has_host;
    pz_omitted *omitted;        /* JSON: in file order */
    uint32_t omitted_count, omitted_cap;
    const kiln_load_desc *desc; /* kiln_load: asked to keep going while the input is read */
} pz_doc;

/* How often a long call with a caller's keep_going (a scene, a prefab, a clone) asks it: every
 * PZ_ASK_ITEMS entities or nodes. */
#define PZ_ASK_ITEMS 4096

/* False, with KILN_ERR_LIMIT and "kiln_load: stopped by the caller after <done> of <total>
 * <what>" set, when the load's caller asks it to stop (kiln_load_desc.keep_going). */
KL_HIDDEN bool pz_keep_going(kiln_world *world, const pz_doc *doc, uint64_t done, uint64_t total,
                             const char *what);

/* ---- schemas.c: a document's schemas by name (both loaders) ---- */
typedef struct pz_schema_names {
    const pz_doc *doc;
    uint32_t *slots;            /* schema index + 1, or 0 (empty) */
    uint32_t mask;
    uint64_t seed;              /* the world's hash_seed */
    int64_t slots_read;         /* by adds and finds, for tests of hostile names */
} pz_schema_names;

/* Room for doc->schema_count names, on doc's arena, hashed with world's seed; false when out
 * of memory. */
KL_HIDDEN bool pz_schema_names_init(pz_schema_names *names, pz_doc *doc, const kiln_world *world);
/* Adds doc->schemas[schema] (its name set); returns the index of an earlier schema of that
 * name (it is not added), or -1. */
KL_HIDDEN int32_t pz_schema_names_add(pz_schema_names *names, uint32_t schema);
/* The index of the schema named name, or -1. */
KL_HIDDEN int32_t pz_schema_names_find(pz_schema_names *names, const char *name);

/* ---- binary.c / json.c: the two formats ---- */
KL_HIDDEN kiln_result pz_save_binary(kiln_world *world, const kiln_save_desc *desc,
                                     const pz_plan *plan, pz_out *out);
KL_HIDDEN kiln_result pz_parse_binary(kiln_world *world, const uint8_t *data, size_t size,
                                      pz_doc *doc);
KL_HIDDEN kiln_result pz_save_json(kiln_world *world, const kiln_save_desc *desc,
                                   const pz_plan *plan, pz_out *out);
KL_HIDDEN kiln_result pz_parse_json(kiln_world *world, const uint8_t *data, size_t size,
                                    pz_doc *doc);

/* ---- stage.c: resolving a staged document against the world and committing it ---- */
KL_HIDDEN kiln_result pz_commit(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc);
/* True when a value of type from can become one of type to without losing anything. */
KL_HIDDEN bool pz_widens(kiln_type from, kiln_type to);
/* Reads element i of a field of type at base as a double / int64 / uint64 (for conversion). */
KL_HIDDEN void pz_convert(kiln_type from, const uint8_t *src, kiln_type to, uint8_t *dst);

/* Checks s against s->info (the world's component of that name, or the layout the addon would
 * register it with). */
KL_HIDDEN kiln_result pz_match_info(kiln_world *world, pz_schema *s, const kiln_load_desc *desc);

/* ---- pending.c: the addon's own components a load registers ---- */
/* Whether name is one of them (Name, RandomSeed, RandomState). */
KL_HIDDEN bool pz_addon_component(const char *name);
/* Checks s (pending: the world lacks it) against the layout it would be registered with. */
KL_HIDDEN kiln_result pz_pending_match(kiln_world *world, pz_schema *s, const kiln_load_desc *desc);
/* The last step of a commit: registers the pending components, makes their resources (noted
 * in created) and adds their values to the loaded entities; fails only for want of memory
 * once they are registered. */
KL_HIDDEN kiln_result pz_pending_land(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc,
                                      kiln_component *created, uint32_t *created_count);

/* names.c: the name index must be rebuilt (a load or a restore changed Names). */
KL_HIDDEN void pz_names_invalidate(kiln_world *world);
/* The layout kiln_name_init registers Name with (size, fields, a check hook), to match a save
 * against before registering anything. */
KL_HIDDEN void pz_names_layout(kiln_component_info *dest);

/* A load's checks of the file's Name values (doc->schemas[schema], pending) before Name is
 * registered: fails naming the first a Name check would refuse (a text with no end, a name
 * two entities of the file hold). */
KL_HIDDEN kiln_result pz_names_check_file(kiln_world *world, pz_doc *doc, uint32_t schema);
/* stage.c: a value of s in the file's layout (src) in the world's (s->info) to dst, the fields
 * the file lacks zero. */
KL_HIDDEN void pz_convert_row(const pz_schema *s, const uint8_t *src, uint8_t *dst);

/* random.c: registers RandomSeed and RandomState; returns the one named name (0 on failure). */
KL_HIDDEN kiln_component pz_random_register(kiln_world *world, const char *name);
/* The layout pz_random_register gives RandomSeed, or else RandomState (size, fields). */
KL_HIDDEN void pz_random_layout(const char *name, kiln_component_info *dest);
/* RandomState's rule (its check hook's): KILN_OK, or KILN_ERR_INVALID_ARGUMENT with why
 * written for a state of all zeros (or NULL), from which xoshiro256** draws 0 forever. */
KL_HIDDEN kiln_result pz_random_state_check(const void *value, char *why, size_t why_size);

/* slots.c: a world that never held entities gets the saved handles (slots: the slot count
 * they need, every saved index is below it). */
KL_HIDDEN bool pz_slots_can_keep(const kiln_world *world, const pz_doc *doc, uint64_t slots);

/* Where the groups land: per group its archetype and first row; the slot pages. */
typedef struct pz_place {
    kl_archetype **archs;
    int32_t *first;
    kl_record *const *pages;
} pz_place;

/* Checks a document's free list (its handles valid and below the slot count: the readers
 * checked): no slot twice, none a saved entity holds. KILN_OK without a free list. */
KL_HIDDEN kiln_result pz_slots_check_free(kiln_world *world, pz_doc *doc);

/* Makes every group's archetype and reserves its rows and the slots (fails naming kiln_load,
 * leaving at most empty archetypes and capacity behind); nothing is alive yet. */
KL_HIDDEN kiln_result pz_slots_reserve(kiln_world *world, pz_doc *doc, uint64_t slots, pz_place *place);

/* Where one group's rows go, read once per group (the loop writing them keeps it in registers). */
typedef struct pz_rows {
    kiln_entity *entities;       /* the archetype's handles from the group's first row */
    kl_record *const *pages;
    uint32_t archetype, first;
} pz_rows;

static inline pz_rows pz_slots_rows(const pz_place *place, uint32_t g) {
    kl_archetype *arch = place->archs[g];
    return (pz_rows){arch->entities + place->first[g], place->pages, arch->id, (uint32_t)place->first[g]};
}

/* Rows [begin, end) of the group at their saved handles h (valid, below the slot count): each
 * slot noted in gen, the rows' handles and records written before the rows are published.
 * Returns end, or the first row whose slot was noted already (a handle twice). */
static inline int64_t pz_slots_write_block(pz_rows w, const kiln_entity *h, int64_t begin, int64_t end,
                                           uint32_t *gen) {
    memcpy(w.entities + begin, h + begin, sizeof(kiln_entity) * (size_t)(end - begin));
    for (int64_t r = begin; r < end; r++) {
        uint32_t idx = (uint32_t)h[r], high = (uint32_t)(h[r] >> 32);
        if (gen[idx]) return r;
        gen[idx] = high;
        kl_record_set_alive(&w.pages[idx >> KL_PAGE_BITS][idx & (KL_PAGE_SIZE - 1)], high, w.archetype,
                            w.first + (uint32_t)r);
    }
    return end;
}

/* Publishes the rows every saved handle was written to (pz_slots_write; saved: non-zero for
 * the slot indices the file holds, slots of them): the other slots become free (the saved free
 * list when the document has one, its other slots retired), the rows' ticks
 * are stamped, the counts move. Cannot fail. The rows' values are left for the caller. */
KL_HIDDEN void pz_slots_place(kiln_world *world, pz_doc *doc, uint64_t slots, const uint32_t *saved,
                              const pz_place *place);

/* ---- handles.c: the handle map of a load (stage.c remaps references through it) ---- */

/* Indexed by slot when the saved indices are dense (the usual case: a direct array), else
 * open addressing on the handle. */
typedef struct pz_handle_map {
    kiln_entity *keys;      /* hashed: saved handles; direct: NULL */
    kiln_entity *values;    /* direct: NULL while the new handles are the saved ones */
    uint32_t *generation;   /* direct: the saved generation per slot index, 0 for none, and a
                               0 past the end */
    uint64_t mask;          /* hashed: capacity - 1; direct: slot count */
} pz_handle_map;

/* The slot count the saved handles need: the header's (version 2), else the highest saved
 * index + 1. */
KL_HIDDEN uint64_t pz_saved_slots(const pz_doc *doc);
/* Checks every saved handle (valid, below slots, no slot twice) into the map (on doc's arena);
 * place: the loaded entities keep their handles, and each row's record and handle are written
 * on the same pass (pz_slots_write). Fails naming kiln_load. */
KL_HIDDEN kiln_result pz_map_build(kiln_world *world, pz_doc *doc, uint64_t slots, const pz_place *place,
                                   pz_handle_map *m);
/* Records the new handles of group gr (nothing to do when they are the saved ones). */
KL_HIDDEN void pz_map_group(pz_handle_map *m, const pz_group *gr);
/* Whether e (not null) is a handle the file holds. */
KL_HIDDEN bool pz_map_has(const pz_handle_map *m, kiln_entity e);
/* The new handle of e, or KILN_NULL_ENTITY when e is null or not a handle of the file. */
KL_HIDDEN kiln_entity pz_map_get(const pz_handle_map *m, kiln_entity e);

/* Little-endian helpers (the formats are little-endian; kiln targets little-endian hosts). */
static inline uint32_t pz_rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t pz_rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#endif
