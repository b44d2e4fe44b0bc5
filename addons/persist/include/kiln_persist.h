/* kiln_persist.h: the persistence addon: save and load a world (binary or JSON), snapshots
 * for rollback, a canonical world hash. Built on kiln.h; every function starts with kiln_. */
#ifndef KILN_PERSIST_H
#define KILN_PERSIST_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   kiln_save, kiln_save_file, kiln_load, kiln_load_file,
 *   kiln_snapshot_create, kiln_snapshot_update, kiln_snapshot_restore, kiln_snapshot_destroy,
 *   kiln_snapshot_bytes,
 *   kiln_world_hash, kiln_name_init, kiln_name_set, kiln_name_get, kiln_name_lookup, kiln_clone,
 *   kiln_random_seed, kiln_random_world, kiln_random_fork, kiln_random_system, kiln_random_next,
 *   kiln_random_double, kiln_random_range.
 *
 * What a save holds: every component schema by name (fields with types, counts and offsets,
 * sorted by name), every live entity with its components (Parent links of the transform
 * addon included: Parent is a component like any other), every set resource, the world tick
 * and optional host bytes. Events, queries, systems and command buffers are not saved.
 *
 * Messages: a failing call leaves "kiln_<function>: <detail>" in kiln_world_error; a loader
 * says where the input is bad ("at byte 120: entity table of group 2 is truncated",
 * "at entities[3].components.Position.x: number expected").
 * Result codes: malformed or truncated input, a wrong version, a duplicated entity:
 * KILN_ERR_INVALID_ARGUMENT; a component or field the world does not know:
 * KILN_ERR_UNKNOWN_COMPONENT; a field whose type changed in a way that loses data:
 * KILN_ERR_LAYOUT_MISMATCH; counts beyond the format's limits: KILN_ERR_LIMIT.
 */

#define KILN_PERSIST_VERSION 1      /* the format version saves are written with */
#define KILN_PERSIST_MAX_EXCLUDE 8

typedef enum kiln_persist_format {
    KILN_PERSIST_BINARY = 0, /* compact, versioned, little-endian: the default */
    KILN_PERSIST_JSON        /* the same content as a JSON document (jansson) */
} kiln_persist_format;

/* Receives output bytes in order; returns false to stop the save (which then fails). */
typedef bool (*kiln_write_fn)(void *ud, const void *data, size_t size);

/* Values of components with destroy or move hooks are not plain bytes (they own something:
 * a Lua value, a heap block). A codec turns them into bytes and back; without one, saving
 * such a component fails naming the entity and the component. */
typedef struct kiln_persist_codec {
    /* Writes the plain form of value (component c of entity e; e is KILN_NULL_ENTITY for a
     * resource) through write(write_ud, ...). Anything but KILN_OK fails the save with
     * "kiln_save: entity 3v1 component 'Script': <why>". */
    kiln_result (*encode)(void *ud, kiln_component c, kiln_entity e, const void *value,
                          kiln_write_fn write, void *write_ud, char *why, size_t why_size);
    /* Builds a value of c into dest (the component's size) from size bytes at data. */
    kiln_result (*decode)(void *ud, kiln_component c, const void *data, size_t size, void *dest,
                          char *why, size_t why_size);
    /* Releases a decoded value that the load did not hand to the world (it failed later). */
    void (*discard)(void *ud, kiln_component c, void *value);
    void *ud;
} kiln_persist_codec;

typedef struct kiln_save_desc {
    kiln_persist_format format;
    const kiln_persist_codec *codec; /* for components with hooks; NULL: they fail the save */
    kiln_component exclude[KILN_PERSIST_MAX_EXCLUDE]; /* zero-terminated: never saved, as
                                        components or resources */
    const void *host_data;           /* optional bytes saved along (a binding's own state) */
    size_t host_size;
} kiln_save_desc;

/* Writes the world through write(ud, ...), in one or more pieces. desc may be NULL (binary).
 * The world is not changed. Fails, having written a prefix, when a value cannot be saved
 * (hooks without a codec, a refusing codec) or write returns false. Not while the world is
 * deferred or iterating (KILN_ERR_INVALID_ARGUMENT). */
kiln_result kiln_save(kiln_world *world, const kiln_save_desc *desc, kiln_write_fn write,
                      void *ud);

/* kiln_save into the file at path (written to path.tmp, then renamed over path, so a failed
 * save leaves an older file whole). */
kiln_result kiln_save_file(kiln_world *world, const char *path, const kiln_save_desc *desc);

/* Called after a successful load, once per loaded entity: its handle in the file and its new
 * handle. */
typedef void (*kiln_load_map_fn)(void *ud, kiln_entity old_entity, kiln_entity new_entity);

/* Receives the host bytes of a save before anything lands; returning false (with why
 * written) fails the load with "kiln_load: host data: <why>", the world untouched. */
typedef bool (*kiln_load_host_fn)(void *ud, const void *data, size_t size, char *why,
                                  size_t why_size);

typedef struct kiln_load_desc {
    bool skip_unknown;               /* skip components and fields the world does not know */
    const kiln_persist_codec *codec; /* for components saved through a codec */
    kiln_load_map_fn mapped;         /* optional */
    kiln_load_host_fn host;          /* optional; NULL ignores host bytes */
    void *ud;                        /* handed to mapped and host */
} kiln_load_desc;

/* Loads size bytes at data (either format, told apart by their first bytes) into world,
 * adding to what it holds. Components and fields match by name, whatever their order and ids:
 * a field the file lacks becomes zero; a widening type change (int8 -> int16 -> int32 ->
 * int64, uint8 -> uint16 -> uint32 -> uint64, an unsigned to a wider signed, int8/16 and
 * uint8/16 to float, any integer up to 32 bits and float to double, a char array to a longer
 * one) is converted; any other change is KILN_ERR_LAYOUT_MISMATCH naming the field. Every
 * entity gets a new handle and every entity field (arrays too, in components and resources)
 * is rewritten; a reference to an entity not in the file becomes KILN_NULL_ENTITY. In a
 * world that never held an entity, entities keep their saved handles. Resources in the file
 * replace the world's. The world tick becomes the saved tick when that is later. Values
 * then pass their components' check hooks (the transform addon refuses Parent cycles).
 * All or nothing: on any failure the world holds the same entities, values and resources as
 * before (slots of entities spawned and taken back keep a bumped generation). Not while
 * deferred or iterating. desc may be NULL. The addon's own components (Name, RandomSeed,
 * RandomState) are registered when a save holds them and the world does not know them yet. */
kiln_result kiln_load(kiln_world *world, const void *data, size_t size,
                      const kiln_load_desc *desc);

/* kiln_load of the file at path ("kiln_load_file: cannot open ..." when it cannot be read). */
kiln_result kiln_load_file(kiln_world *world, const char *path, const kiln_load_desc *desc);

/* ---- Snapshots ---------------------------------------------------------------------------- */

/* An in-memory copy of a world for rollback and replays, owned by the caller. */
typedef struct kiln_snapshot kiln_snapshot;

/* Copies every entity slot (handles, generations, the free list), every row with its change
 * ticks, every resource without hooks and the tick into a new snapshot written to dest (one
 * block from the world's allocator hook). Resources with hooks (they own something) are not
 * part of it: a restore leaves them as they are. Fails with KILN_ERR_INVALID_ARGUMENT naming
 * the entity and component when a live value has destroy or move hooks (it cannot be copied
 * bytewise), or when the world is deferred or iterating; KILN_ERR_OUT_OF_MEMORY. */
kiln_result kiln_snapshot_create(kiln_world *world, kiln_snapshot **dest);

/* kiln_snapshot_create into an existing snapshot of the same world, reusing its memory when it
 * is large enough (a rollback loop that snapshots every frame allocates nothing). On failure
 * snap still holds what it held. */
kiln_result kiln_snapshot_update(kiln_world *world, kiln_snapshot *snap);

/* Puts the world back as it was when snap was taken: the same live entities with the same
 * handles (and the same handles for entities spawned next), values, change ticks, resources
 * and tick. Entities spawned since are gone (their destroy hooks run), resources set since and
 * without hooks are removed. Archetypes record the restore as a structural change at the tick
 * the world had before it, so incremental caches (transform propagation) recompute. Fails,
 * the world unchanged, when snap comes from another world, or memory runs out (for archetype
 * rows or resources that must be re-created). Not while deferred or iterating. */
kiln_result kiln_snapshot_restore(kiln_world *world, const kiln_snapshot *snap);

/* Frees a snapshot (NULL: no-op). It may outlive its world (its allocator hook must not). */
void kiln_snapshot_destroy(kiln_snapshot *snap);

/* Bytes the snapshot holds. */
size_t kiln_snapshot_bytes(const kiln_snapshot *snap);

/* ---- Hash --------------------------------------------------------------------------------- */

/* A 64-bit XXH3 hash of the world's logical content: every live entity's handle with its
 * components (by name) and their value bytes, every resource, and the tick. Archetype and row
 * order, component ids and registration order do not change it. Values of components and
 * resources with hooks count by presence only (their bytes are handles to what they own). */
uint64_t kiln_world_hash(const kiln_world *world);

/* ---- Names ------------------------------------------------------------------------------- */

/* "Name": an entity's unique name, a plain component (saved, loaded and snapshot like any
 * other) with a check hook that refuses a name another live entity holds. */
#define KILN_NAME_MAX 63
typedef struct kiln_name {
    char text[KILN_NAME_MAX + 1]; /* NUL-terminated; "" means no name */
} kiln_name;

/* Registers Name (idempotent) and the name index, kept as the context of a teardown hook;
 * writes the component to dest (may be NULL). */
kiln_result kiln_name_init(kiln_world *world, kiln_component *dest);

/* Names entity (adds or sets its Name); NULL or "" removes the name. Fails with
 * KILN_ERR_INVALID_ARGUMENT for a name over 63 bytes or one another live entity holds
 * ("kiln_name_set: name 'hero' is taken by entity 3v1"), KILN_ERR_DEAD_ENTITY for a dead
 * entity. Runs kiln_name_init when needed. Deferred like any add when the world is. */
kiln_result kiln_name_set(kiln_world *world, kiln_entity entity, const char *name);

/* The entity's name, or NULL when it has none (or is dead). Borrowed: valid until the
 * entity's next structural change. */
const char *kiln_name_get(const kiln_world *world, kiln_entity entity);

/* The live entity named name, or KILN_NULL_ENTITY; constant time on average through an index
 * kept in the world. The index follows kiln_name_set, kiln_load and snapshot restores at
 * once; a Name written another way (kiln_set, kiln_get_mut) is seen after the next structural
 * change of named entities or from the next tick on. */
kiln_entity kiln_name_lookup(kiln_world *world, const char *name);

/* ---- Clone -------------------------------------------------------------------------------- */

typedef struct kiln_clone_desc {
    bool tree; /* copy the descendants too (transform Parent links), keeping their shape */
} kiln_clone_desc;

/* Spawns a copy of entity with copies of its components, under the same parent, and writes it
 * to dest (may be NULL). With tree, every descendant is copied under its copied parent, and
 * entity fields in the copies that point inside the copied tree point to the copies. Names
 * are not copied (they are unique). Components with hooks cannot be copied bytewise: fails
 * with KILN_ERR_INVALID_ARGUMENT naming the entity and component, nothing spawned. desc may
 * be NULL. Not while deferred. */
kiln_result kiln_clone(kiln_world *world, kiln_entity entity, const kiln_clone_desc *desc,
                       kiln_entity *dest);

/* ---- Seeded random ----------------------------------------------------------------------- */

/* A xoshiro256** generator (our own code; 256 bits of state, period 2^256 - 1). Plain data:
 * copy it to fork a stream, store it to replay one. */
typedef struct kiln_random {
    uint64_t s[4];
} kiln_random;

/* Seeds the world: its main stream (the "RandomState" resource, so saves, loads, snapshots
 * and the hash carry it) restarts from seed, and every fork depends on it. A world that was
 * never seeded has seed 0. */
kiln_result kiln_random_seed(kiln_world *world, uint64_t seed);

/* The world's main stream, for code outside systems: a pointer into the RandomState resource
 * (created with seed 0 when missing; NULL only when out of memory). Borrowed like any
 * resource value. */
kiln_random *kiln_random_world(kiln_world *world);

/* A stream that depends only on the world's seed, stream (a name, e.g. a system's) and tick:
 * the same three give the same values on any thread, in any order. */
kiln_random kiln_random_fork(const kiln_world *world, const char *stream, kiln_tick tick);

/* kiln_random_fork for a running system: (seed, ctx->name, current tick). Call it once per
 * run and draw from the copy, so a system's values do not depend on thread timing. */
kiln_random kiln_random_system(const kiln_system_ctx *ctx);

/* The next 64 random bits. */
uint64_t kiln_random_next(kiln_random *random);

/* A double in [0, 1) with 53 random bits. */
double kiln_random_double(kiln_random *random);

/* An integer in [lo, hi] (both included), without modulo bias; lo when hi < lo. */
int64_t kiln_random_range(kiln_random *random, int64_t lo, int64_t hi);

#ifdef __cplusplus
}
#endif
#endif /* KILN_PERSIST_H */
