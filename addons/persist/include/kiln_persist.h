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
 *   kiln_snapshot_bytes, kiln_snapshot_count,
 *   kiln_world_hash, kiln_world_content_hash, kiln_name_init, kiln_name_set, kiln_name_get,
 *   kiln_name_lookup, kiln_name_slots_read, kiln_clone,
 *   kiln_random_init, kiln_random_seed, kiln_random_world, kiln_random_fork, kiln_random_system,
 *   kiln_random_next, kiln_random_double, kiln_random_range,
 *   kiln_prefab_create, kiln_prefab_load, kiln_prefab_load_file, kiln_prefab_spawn,
 *   kiln_prefab_nodes, kiln_prefab_destroy, kiln_instantiate, kiln_instantiate_file,
 *   kiln_instance_roots, kiln_instance_spawned, kiln_instance_entity, kiln_instance_name,
 *   kiln_instance_properties, kiln_instance_despawn, kiln_instance_destroy, kiln_export.
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
 *
 * Hooks: a component's destroy or move hook runs in the middle of a change (kiln.h), an entity
 * that moves sitting in two rows, so a call that changes, copies or reads the whole world fails
 * from one with KILN_ERR_INVALID_ARGUMENT ("kiln_load: called from a component's destroy or
 * move hook ..."): kiln_save, kiln_load, kiln_snapshot_create, _update and _restore,
 * kiln_clone, kiln_prefab_spawn, kiln_instantiate, kiln_instance_despawn and kiln_export, the
 * world unchanged; kiln_world_hash and kiln_world_content_hash return 0 with that message.
 *
 * Owner marks (kiln_component_desc.owner: a tag saying whose an entity is, such as the Lua
 * binding's kiln.mod.NAME on a mod's entities) are not copied: kiln_clone, kiln_prefab_create,
 * kiln_prefab_load and kiln_instantiate leave them off (a copy is its maker's), so a copy never
 * becomes the marked owner's, to be counted or taken away with it. Saves, snapshots and
 * kiln_export keep them (they say what the world holds); kiln_load gives them back as saved
 * unless desc.owned drops them or refuses the load.
 */

#define KILN_PERSIST_VERSION 4      /* the binary format's version saves are written with
                                       (versions 1 to 3 still load) */
#define KILN_PERSIST_JSON_VERSION 2 /* the JSON format's version (its "kiln" key; 1 still loads) */
/* The latest tick a save may hold (2^53 - 1); kiln_load refuses a later one. The world takes
 * its tick from a save: one near 2^64 would wrap a few ticks on (change ticks and the structure
 * ticks propagation trusts would run back), and Lua numbers under LuaJIT are exact to 2^53. */
#define KILN_SAVE_TICK_MAX KILN_TICK_MAX /* kiln_tick_advance goes no further */

/* A JSON save keeps every byte a binary one keeps (a world hashes the same after either round
 * trip): non-finite floats are strings, "inf", "-inf", "nan" and "-nan" (the quiet NaN of that
 * sign) and any other NaN as "nan(0xM)" / "-nan(0xM)", M the whole mantissa field in hex (0x1
 * to 0x7fffff for a float, 0xfffffffffffff for a double), read back to the same bits; a char
 * array is a string of its bytes up to the last non-NUL one (a NUL inside as \u0000, the bytes
 * after it kept), and must be UTF-8 text (else the JSON save fails naming the field), as must
 * the names of the components, resources and fields saved (else it fails naming the name). */
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
    /* Optional: called as the save goes with the work it is about to do, in units: one an
     * entity, and in JSON one more for each of its values and their fields' elements (JSON
     * before every 256 entities, binary before each archetype). Returning false stops the save with
     * KILN_ERR_LIMIT ("kiln_save: stopped by desc.progress"), a prefix written: a host can
     * time, charge or cancel a long save with it. */
    bool (*progress)(void *ud, int64_t units);
    void *progress_ud;
} kiln_save_desc;

/* Writes the world through write(ud, ...), in one or more pieces. desc may be NULL (binary).
 * The world is not changed. Fails, having written a prefix, when a value cannot be saved
 * (hooks without a codec, a refusing codec) or write returns false. Not while the world is
 * deferred or iterating, nor while a schedule runs systems that are not exclusive (an
 * exclusive system may save: see persistence.md) (KILN_ERR_INVALID_ARGUMENT). While it runs the world counts as iterating,
 * as in a loop: a spawn, despawn, add, remove or set from write, progress or the codec is queued
 * and lands as the save returns (its result then, when the save itself succeeded), so the file
 * holds the world as it was called; kiln_commands_apply from them asserts; a planned resource
 * they remove fails the save ("kiln_save: resource 'Score' was removed while the save ran ..."). */
kiln_result kiln_save(kiln_world *world, const kiln_save_desc *desc, kiln_write_fn write,
                      void *ud);

/* kiln_save into the file at path (written to path.tmp, flushed to the disk with fsync, then
 * renamed over path, so a failed save, or a crash or power loss at any point, leaves path
 * holding the older file or the new one, whole; the fsync may take milliseconds, which an
 * autosave from a system spends in its frame). A save whose path.tmp another save to the
 * same path replaced meanwhile fails ("kiln_save_file: <path>.tmp was replaced while the save
 * ran ...") and renames nothing, so of two saves at once to one path one lands whole and the
 * other fails; the check and the rename are two calls, so keep one saver per path to be sure.
 * path.tmp is made new: whatever had that name (a stale
 * file, a link, a pipe) is unlinked first, so a save never writes through a link into
 * another file nor waits on a pipe. The folder of path is opened once, at the call (it must
 * be readable), and the file made, checked and renamed in it, so a link on the way swapped
 * meanwhile does not move the save; after the rename the folder is synced too, and a failed
 * folder sync fails the call ("kiln_save_file: <path> is written, but syncing its folder
 * failed: ..."; path then holds the new file, which a power loss may undo). The new file keeps
 * the permission bits (rwx, never a set-ID or sticky bit) of the file path named (a first save
 * follows the umask; where they cannot be set, as on vfat, the save lands and stays 0600); a
 * device, a pipe or a socket at path (or a link to one) is refused, never replaced. Every
 * failure names the file; before the rename, path is left as it was. */
kiln_result kiln_save_file(kiln_world *world, const char *path, const kiln_save_desc *desc);

/* Called after a successful load, once per loaded entity: its handle in the file and its new
 * handle. */
typedef void (*kiln_load_map_fn)(void *ud, kiln_entity old_entity, kiln_entity new_entity);

/* Receives the host bytes of a save before anything lands; returning false (with why
 * written) fails the load with "kiln_load: host data: <why>", the world untouched. */
typedef bool (*kiln_load_host_fn)(void *ud, const void *data, size_t size, char *why,
                                  size_t why_size);

/* Called once a load is read, matched and decoded, after the host bytes and just before anything
 * lands, with the number of entities it will spawn; returning false (with why written) fails
 * the load with KILN_ERR_OUT_OF_MEMORY and "kiln_load: <why>", the world untouched. A caller that must get ready for what
 * follows (room for the map of new handles) does it here, where failing still costs nothing. */
typedef bool (*kiln_load_ready_fn)(void *ud, int64_t entity_count, char *why, size_t why_size);

/* Asked while a load reads its input, before anything lands: after every MiB kiln_load_file
 * reads from its file, every 64 KiB of JSON text and every 4096 entities read, and once
 * before the load lands. Returning false stops the load with KILN_ERR_LIMIT and "kiln_load:
 * stopped by the caller after N of M bytes" (or "... after N of M entities"; kiln_load_file
 * while reading its file: "kiln_load_file: stopped by the caller after N of M bytes read"),
 * the world untouched. For a caller with a time limit (a console statement): the reading,
 * which takes most of a large load's time, can then be cut short; the landing itself is not. */
typedef bool (*kiln_load_continue_fn)(void *ud);

/* Asked once a load is matched, before the host bytes and anything lands, for each owner mark
 * (kiln_component_desc.owner) the save puts on entities, with how many: returning true loads
 * them (with *drop set, which starts false, they land without the mark); false (why written)
 * fails the load with KILN_ERR_LIMIT and "kiln_load: <why>", the world untouched. For a host
 * whose owners have limits, or whose marks a load must not hand to an owner that is gone. */
typedef bool (*kiln_load_owned_fn)(void *ud, kiln_component mark, int64_t entities, bool *drop, char *why,
                                   size_t why_size);

typedef struct kiln_load_desc {
    bool skip_unknown;               /* skip components and fields the world does not know */
    const kiln_persist_codec *codec; /* for components saved through a codec */
    kiln_load_map_fn mapped;         /* optional */
    kiln_load_host_fn host;          /* optional; NULL ignores host bytes */
    void *ud;                        /* handed to mapped, host, ready, keep_going and owned */
    kiln_load_ready_fn ready;        /* optional */
    kiln_load_continue_fn keep_going; /* optional */
    kiln_load_owned_fn owned;        /* optional; NULL loads owner marks as saved */
    /* Optional, 0: any size. The most bytes the save may have: a larger one is refused with
     * KILN_ERR_LIMIT before it is read ("kiln_load: the save is larger than 4096 bytes (5000
     * bytes)"; kiln_load_file names the file). For a caller that charged a file's size against a
     * budget before the call: a file grown since is not read past what was charged. */
    uint64_t max_bytes;
    /* Optional, 0: no limit past max_bytes. The most bytes a JSON save may have, checked before
     * its parse (KILN_ERR_LIMIT, "kiln_load: the JSON save is larger than 4096 bytes (5000
     * bytes)"): for a caller that charged a binary file its size, where a JSON one replacing it
     * meanwhile would cost many times its size to parse. */
    uint64_t max_json_bytes;
} kiln_load_desc;

/* Loads size bytes at data (either format, told apart by their first bytes) into world,
 * adding to what it holds. Components and fields match by name, whatever their order and ids:
 * a field the file lacks takes the component's registered defaults (zero without any); a widening type change (int8 -> int16 -> int32 ->
 * int64, uint8 -> uint16 -> uint32 -> uint64, an unsigned to a wider signed, int8/16 and
 * uint8/16 to float, any integer up to 32 bits and float to double, a char array to a longer
 * one) is converted; any other change is KILN_ERR_LAYOUT_MISMATCH naming the field. Every
 * entity gets a new handle and every entity field (arrays too, in components and resources)
 * is rewritten. A save writes null for a reference to an entity it does not hold, so a non-null
 * reference to one the file does not hold (Parent like any other field) fails the load with
 * KILN_ERR_INVALID_ARGUMENT: "kiln_load: entity 1v1 component 'Link' field 'to[0]' points to
 * 40v1, an entity the file does not hold (a save writes null there)" (the entity by its handle
 * in the file; "resource 'Link' field ..." for a resource). In a
 * world that never held an entity, entities keep their saved handles. Resources in the file
 * replace the world's. The world tick becomes the saved tick (at most KILN_SAVE_TICK_MAX) when that is later. Values
 * then pass their components' check hooks (the transform addon refuses Parent cycles); a
 * structural or whole-world call from one fails ("kiln_add: called from a component's check
 * hook while kiln_load checks the values it loads; ...").
 * All or nothing: on any failure the world holds the same entities, values and resources as
 * before, and every slot the load took goes back as it was (kiln_unspawn), so kiln_world_hash
 * is unchanged and the next spawns get the same handles. Not while deferred or iterating.
 * desc may be NULL. The addon's own components (Name, RandomSeed, RandomState) are registered
 * when a save holds them and the world does not know them yet, once their saved layouts match
 * kiln's (another is refused first), as the load's last step: after every other check has
 * passed (their own values checked first: a name with no end or given twice, a RandomState of
 * all zero), so a load refused for its input registers nothing. Out of memory in that step
 * leaves them registered, with no entity or value (the hash does not see them): the core never
 * takes a registration back, as the archetypes made for it stay in the graph naming its id and
 * other threads read the registry without a lock. */
kiln_result kiln_load(kiln_world *world, const void *data, size_t size,
                      const kiln_load_desc *desc);

/* kiln_load of the file at path ("kiln_load_file: cannot open ..." when it cannot be read). A
 * path that is not a regular file (a device such as /dev/zero, a pipe, a folder) is refused
 * ("kiln_load_file: /dev/zero is not a regular file"): it might never end. The file is opened
 * without blocking, so a pipe no one writes to is refused at once instead of waited on. It is
 * read no further than the size it had when opened: one that reads on past it (growing while
 * read, or a pseudo-file such as /proc/self/pagemap, of size 0 and hundreds of GiB long) is
 * refused ("kiln_load_file: /proc/self/pagemap reads on past its size (0 bytes): it is not a
 * file of fixed size"). The prefab and scene file loaders below refuse them the same way. */
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
 * rows or resources that must be re-created). Not while deferred or iterating. The destroy
 * hooks it runs are under that rule too, and a kiln_resource_remove from them fails (the
 * restore holds the resources it put in place); a kiln_resource_set from them lands. */
kiln_result kiln_snapshot_restore(kiln_world *world, const kiln_snapshot *snap);

/* Frees a snapshot (NULL: no-op). It may outlive its world (its allocator hook must not); a
 * world made later refuses it as another world's, even one at the destroyed world's address. */
void kiln_snapshot_destroy(kiln_snapshot *snap);

/* Bytes the snapshot holds. */
size_t kiln_snapshot_bytes(const kiln_snapshot *snap);

/* How many entities of snap have component (a tag too): what a restore brings back with it, so
 * a host with limits per owner can refuse it first. -1 when snap is another world's, with the
 * world error set (KILN_ERR_INVALID_ARGUMENT's), in every build. */
int64_t kiln_snapshot_count(const kiln_world *world, const kiln_snapshot *snap, kiln_component component);

/* ---- Hash --------------------------------------------------------------------------------- */

/* A 64-bit XXH3 hash of the world's logical content: every live entity's handle with its
 * components (by name) and their value bytes, every resource, the tick, and the slot count and
 * free list (with generations), which decide the handles of the next spawns. Archetype and row
 * order, component ids and registration order do not change it. Only the bytes a component's
 * fields cover enter it, never padding; a component registered without fields has no layout to
 * go by and enters whole, padding included. Values of components and resources with hooks
 * count by presence only (their bytes are handles to what they own). Never 0: 0 is the refusal
 * from a component's destroy or move hook mid-change (a moving entity sits in two rows), and
 * while a schedule runs systems that are not exclusive (on any thread: they may write any
 * column as it is read; hash from an exclusive system, which sees what a hash between frames
 * would), with kiln_world_error saying so. */
uint64_t kiln_world_hash(const kiln_world *world);

/* kiln_world_hash without the slots: the live content alone, so a world that spawned and
 * despawned an entity hashes as it did (its next handles differ). For "did the content change"
 * checks, e.g. after a failed mod load that handed handles out (those slots stay spent).
 * 0 from a hook mid-change or beside running systems, as kiln_world_hash. */
uint64_t kiln_world_content_hash(const kiln_world *world);

/* ---- Names ------------------------------------------------------------------------------- */

/* "Name": an entity's unique name, a plain component (saved, loaded and snapshot like any
 * other) with a check hook that refuses a name another live entity holds. */
#define KILN_NAME_MAX 63
typedef struct kiln_name {
    char text[KILN_NAME_MAX + 1]; /* NUL-terminated; "" means no name */
} kiln_name;

/* Registers Name (idempotent) and the name index, kept as the context of a teardown hook;
 * writes the component to dest (may be NULL). KILN_ERR_OUT_OF_MEMORY leaves the world without
 * names (Name may be registered, but a Name value is refused until a call succeeds); calling
 * again finishes the work. A main-thread system may call it (a retry too) while worker systems
 * run: they see no names, or the whole index. From a worker system, job or thread while a
 * stage runs it is KILN_ERR_INVALID_ARGUMENT, nothing registered. */
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
 * kept in the world. The index follows at once every Name written through its check (spawns,
 * adds, sets, command buffers, kiln_name_set), despawns, removes, kiln_load and snapshot
 * restores; a Name written through a pointer (kiln_get_mut, or a query's column with the row
 * marked changed) is seen from the next tick on. Keeping up costs the rows that changed, but a
 * look-up after both a despawn and a named spawn in one archetype reads that archetype's row
 * ticks and rehashes the names stamped this tick (all of them, when most are), as does the
 * first look-up of a tick after Names were written where they were (not spawned). */
kiln_entity kiln_name_lookup(kiln_world *world, const char *name);

/* How many slots of the name index the look-ups, names set and removed and its rebuilds have
 * read in this world, ever (0 before kiln_name_init). The index hashes names with a seed drawn
 * per world, which no script or file can know, so the names it is given cannot be picked to
 * pile into one run of slots: a look-up reads about two slots, whatever the names. A host
 * that lets scripts name entities reads this before and after their calls to charge them. */
int64_t kiln_name_slots_read(const kiln_world *world);

/* ---- Clone -------------------------------------------------------------------------------- */

typedef struct kiln_clone_desc {
    bool tree; /* copy the descendants too (transform Parent links), keeping their shape */
    /* Optional: asked after every 4096 entities read and every 4096 copies spawned, and once
     * when every copy is made; false stops the clone with KILN_ERR_LIMIT ("kiln_clone:
     * stopped by the caller after N of M entities") and takes every copy back, their slots
     * as they were: the world as before. */
    kiln_load_continue_fn keep_going;
    void *ud;                  /* handed to keep_going */
} kiln_clone_desc;

/* Spawns a copy of entity with copies of its components, under the same parent, and writes it
 * to dest (may be NULL). With tree, every descendant (as kiln_transform_children finds them)
 * is copied under its copied parent, and entity fields in the copies that point inside the
 * copied tree point to the copies. Names and owner marks are not copied (names are unique;
 * owner marks: see the top). Components with hooks cannot be copied bytewise: fails
 * with KILN_ERR_INVALID_ARGUMENT naming the entity and component, nothing spawned. So does
 * a tree whose root is its own descendant (a Parent cycle written through a pointer). Check
 * hooks see every value: copies spawn with the originals' values, then each value whose
 * entity fields now point at copies is set as kiln_set sets it (parents first), the hook
 * seeing the copy and the remapped value; a refusal fails the clone with the hook's code,
 * "kiln_clone: the copy of entity 3v1 component 'Link': <why>", and takes every copy back.
 * desc may be NULL. Not while deferred. */
kiln_result kiln_clone(kiln_world *world, kiln_entity entity, const kiln_clone_desc *desc,
                       kiln_entity *dest);

/* ---- Seeded random ----------------------------------------------------------------------- */

/* A xoshiro256** generator (our own code; 256 bits of state, period 2^256 - 1). Plain data:
 * copy it to fork a stream, store it to replay one. */
typedef struct kiln_random {
    uint64_t s[4];
} kiln_random;

/* Registers the generator's two resource components, "RandomSeed" and "RandomState"
 * (idempotent; sets neither resource). The other calls register them on first use; a host
 * whose scripts may declare components calls this first, so that no other layout can take
 * those names. Fails when a component of either name has another layout. RandomState's check
 * hook refuses a state of all zeros, from which xoshiro256** draws 0 forever: kiln_resource_set
 * and kiln_load fail with KILN_ERR_INVALID_ARGUMENT ("... RandomState is all zero ..."). It registers: from a
 * worker system, job or thread while a stage runs it is refused like kiln_component_register. */
kiln_result kiln_random_init(kiln_world *world);

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

/* ---- Prefabs ------------------------------------------------------------------------------ */

/* A reusable tree of entities: a root node with component values and child nodes, spawned as
 * many times as needed (children linked to their parents with the transform addon's Parent).
 * Nodes are numbered from 1 in pre-order (the root is 1, then its first child and that
 * child's subtree, ...). An entity field of a node's value holding a node number (1 .. 2^32-1:
 * no live handle is that small) points at that node's entity in each spawned copy; 0 is null,
 * any other value (a live handle) is kept. Made for one world (its component ids). */
typedef struct kiln_prefab kiln_prefab;

#define KILN_PREFAB_MAX_NODES (1 << 20)
#define KILN_PREFAB_MAX_DEPTH 64

typedef struct kiln_prefab_desc {
    const kiln_component *components;    /* component_count distinct components */
    const void *const *values;           /* per component, copied; NULL (or an entry NULL):
                                            the component's defaults */
    int32_t component_count;
    const struct kiln_prefab_desc *children;
    int32_t child_count;
} kiln_prefab_desc;

/* Checks desc whole (known components, no duplicates, no values with hooks, no Parent: the tree
 * gives links; at most KILN_PREFAB_MAX_NODES nodes, KILN_PREFAB_MAX_DEPTH deep), copies every
 * value but owner marks' (left off: see the top) and writes a new prefab to dest. Failures name the node ("kiln_prefab_create: node 3
 * component 'Script' has hooks ..."); nothing is kept. The prefab owns its memory (the world's
 * allocator hook) and is freed with kiln_prefab_destroy. */
kiln_result kiln_prefab_create(kiln_world *world, const kiln_prefab_desc *desc, kiln_prefab **dest);

/* A prefab from size bytes of JSON of the shape {"components": {Name: {field: value, ...}},
 * "children": [prefab, ...]} (both optional, no other key): fields by name (numbers, booleans,
 * strings for char arrays, arrays for vectors and array fields, non-finite floats as in a JSON
 * save: "inf", "-inf", "nan", "-nan", "nan(0xM)"), a tag as
 * true, a component without reflected fields as a hex string, entity fields as node numbers
 * or null. A field left out takes the component's default. Any error names where
 * ("kiln_prefab_load: at children[0].components.Position.x: a number expected, got a string"):
 * KILN_ERR_INVALID_ARGUMENT for malformed or truncated JSON, wrong types and refs to no node,
 * KILN_ERR_UNKNOWN_COMPONENT for a component or field the world does not know,
 * KILN_ERR_LIMIT beyond the node or depth limits. desc may be NULL. */
typedef struct kiln_prefab_load_desc {
    /* Optional: asked after every 64 KiB of JSON text and every 4096 nodes read (and, from a
     * file, every MiB read); false stops the load with KILN_ERR_LIMIT ("kiln_prefab_load:
     * stopped by the caller after N of M bytes", or "... nodes"), nothing made. For a caller
     * with a time limit (a console statement). */
    kiln_load_continue_fn keep_going;
    void *ud;                  /* handed to keep_going */
    uint64_t max_bytes;        /* optional, 0: any size; a larger file is refused (kiln_load_desc's) */
} kiln_prefab_load_desc;
kiln_result kiln_prefab_load(kiln_world *world, const void *data, size_t size,
                             const kiln_prefab_load_desc *desc, kiln_prefab **dest);

/* kiln_prefab_load of the file at path ("kiln_prefab_load_file: cannot open ..."). desc may be
 * NULL. */
kiln_result kiln_prefab_load_file(kiln_world *world, const char *path,
                                  const kiln_prefab_load_desc *desc, kiln_prefab **dest);

typedef struct kiln_prefab_spawn_desc {
    /* Optional: asked after every 4096 entities spawned (between copies: one copy is not cut)
     * and once after the last copy; false stops the spawn with KILN_ERR_LIMIT
     * ("kiln_prefab_spawn: stopped by the caller after N of M entities") and takes back every
     * entity the call spawned, their slots as they were: the world as before. For a caller
     * with a time limit (a console statement). */
    kiln_load_continue_fn keep_going;
    void *ud;                  /* handed to keep_going */
} kiln_prefab_spawn_desc;

/* Spawns count copies of the prefab's tree and writes the count roots to dest (may be NULL).
 * Node references point inside each copy; values pass their check hooks (a Name that another
 * entity holds is refused). All or nothing: on failure every entity spawned by the call is
 * despawned. Registers the transform components when the tree has links. Fails for a prefab
 * made for another world (one made later at its destroyed world's address too), a negative
 * count, while the world is deferred or iterating, and with KILN_ERR_LIMIT before anything
 * is spawned for a count whose nodes exceed INT32_MAX or the entity slots left, or that puts
 * more rows in one archetype than its limit (2^27) allows.
 * desc may be NULL (nothing asked). */
kiln_result kiln_prefab_spawn(kiln_world *world, const kiln_prefab *prefab, int32_t count,
                              const kiln_prefab_spawn_desc *desc, kiln_entity *dest);

/* Number of nodes of the prefab (the entities one spawn makes). */
int64_t kiln_prefab_nodes(const kiln_prefab *prefab);

/* Frees a prefab (NULL: no-op). It may outlive its world (its allocator hook must not). */
void kiln_prefab_destroy(kiln_prefab *prefab);

/* ---- Scenes ------------------------------------------------------------------------------- */

/* A scene is a versioned JSON document:
 *   {"version": 1, "name": "level 1", "properties": {...any JSON...},
 *    "entities": [{"name": "ship", "parent": 2, "prefab": "fighter",
 *                  "components": {"Position": {"x": 1}, "Target": {"entity": 3}}}, ...]}
 * Entities are numbered from 1 in list order. Every key of an entity is optional: name (unique
 * in the scene, 1..63 bytes; found with kiln_instance_entity, not a world Name), parent (an
 * entity number), prefab (a name given to kiln_instantiate: the entity is the prefab's root,
 * its children come along) and components (values as in kiln_prefab_load, merged field by
 * field over the prefab root's values). Entity fields hold entity numbers or null. */
#define KILN_SCENE_VERSION 1
#define KILN_SCENE_MAX_ENTITIES (1 << 20) /* entities an instance spawns, prefab nodes included */

/* The entities one kiln_instantiate spawned; several instances of one scene coexist. */
typedef struct kiln_instance kiln_instance;

typedef struct kiln_instantiate_desc {
    const char *const *prefab_names;     /* prefab_count names, for the scene's "prefab" keys */
    const kiln_prefab *const *prefabs;   /* made for this world */
    int32_t prefab_count;
    kiln_entity parent;                  /* not null: the scene's roots become its children */
    /* Optional: asked while the scene is read: after every 64 KiB of JSON text, every 4096
     * entities checked and (from a file) every MiB read, once just before the spawns and once
     * after them. False stops with KILN_ERR_LIMIT ("kiln_instantiate: stopped by the caller
     * after N of M bytes", or "... entities", or "... entities spawned") and the world as it
     * was: spawns already made are taken back, their slots as they were. The spawning itself
     * is not cut short; the last ask lets a caller whose time ran out during it (a console
     * statement) have it undone rather than kept with no instance to reach it by. */
    kiln_load_continue_fn keep_going;
    void *ud;                            /* handed to keep_going */
    uint64_t max_bytes; /* optional, 0: any size; a larger file is refused (kiln_load_desc's) */
} kiln_instantiate_desc;

/* Spawns the scene in size bytes of JSON and writes its instance to dest. Everything is read
 * and checked before the first spawn: the version, the keys and types of every value,
 * component and field names, prefab names, entity numbers (parent and entity fields name an
 * entity of the scene), parent cycles, parent chains deeper than KILN_TRANSFORM_MAX_DEPTH (those
 * above desc->parent counted), the entity limit. Errors say where ("kiln_instantiate:
 * at entities[2].parent: entity 7 is not in the scene (1..3)"); codes as kiln_prefab_load, and
 * KILN_ERR_DEAD_ENTITY for a dead desc->parent. All or nothing: a failure while spawning (a
 * check hook, out of memory) takes back every entity, the world as before. Not while deferred or
 * iterating. desc may be NULL. */
kiln_result kiln_instantiate(kiln_world *world, const void *data, size_t size,
                             const kiln_instantiate_desc *desc, kiln_instance **dest);

/* kiln_instantiate of the file at path. */
kiln_result kiln_instantiate_file(kiln_world *world, const char *path,
                                  const kiln_instantiate_desc *desc, kiln_instance **dest);

/* The instance's roots (its scene entities without a parent, in scene order) / every entity
 * it spawned (scene order, each followed by its prefab's other nodes): writes up to capacity
 * handles to dest and returns how many there are. */
int64_t kiln_instance_roots(const kiln_instance *instance, kiln_entity *dest, int64_t capacity);
int64_t kiln_instance_spawned(const kiln_instance *instance, kiln_entity *dest, int64_t capacity);

/* The entity the scene named name, or KILN_NULL_ENTITY (no such name). It may have died since. */
kiln_entity kiln_instance_entity(const kiln_instance *instance, const char *name);

/* The scene's name ("" when it has none) and its properties as compact JSON text ("{}" when
 * it has none). Borrowed: valid until kiln_instance_destroy. */
const char *kiln_instance_name(const kiln_instance *instance);
const char *kiln_instance_properties(const kiln_instance *instance);

/* Despawns the instance's entities that are still alive (not others parented to them since).
 * Not while deferred. KILN_ERR_INVALID_ARGUMENT, nothing despawned, for world not the one
 * the instance was spawned in. */
kiln_result kiln_instance_despawn(kiln_world *world, kiln_instance *instance);

/* Frees an instance (NULL: no-op); its entities stay. */
void kiln_instance_destroy(kiln_instance *instance);

typedef struct kiln_export_desc {
    const kiln_entity *roots;  /* root_count live entities; 0: every entity without a (live)
                                  parent, by handle */
    int32_t root_count;
    const char *name;          /* the scene's name; NULL: none */
    /* Optional, as kiln_save_desc.progress: called with the work about to be done, in units
     * (one an entity, before every 256 entities; then 0 after every 64 KiB of text written).
     * Before the first entity, 0 after every 4096 entities indexed, sorted by handle or
     * numbered (on a million entities that work is a large part of the export). Returning
     * false stops the export with KILN_ERR_LIMIT ("kiln_export: stopped by desc.progress"),
     * maybe a prefix written. */
    bool (*progress)(void *ud, int64_t units);
    void *progress_ud;
} kiln_export_desc;

/* Writes a scene (version KILN_SCENE_VERSION, JSON) of the roots and all their descendants in
 * pre-order (children by handle), through write(ud, ...): parents as entity numbers, names
 * from Name components (as "name" and the Name component), every other component with its
 * fields; entity fields that point outside the scene become null. kiln_instantiate reads it
 * back. Fails naming the entity and component for a value with hooks or a char array that is
 * not UTF-8 text (JSON holds nothing else), naming a component or field whose name is not
 * UTF-8, naming the root for a dead root or one given twice
 * (or under another root), naming an entity of a Parent cycle (written through a pointer)
 * that no root reaches when desc gives no roots, when write returns false, from a component's
 * destroy or move hook mid-change, and while a schedule runs systems that are not exclusive
 * (on any thread; an exclusive system may export). Chains of any depth are walked without
 * recursion. The world is not changed. desc may be NULL. As in kiln_save, the world counts as
 * iterating meanwhile: what progress or write changes lands as the export returns. */
kiln_result kiln_export(kiln_world *world, const kiln_export_desc *desc, kiln_write_fn write,
                        void *ud);

#ifdef __cplusplus
}
#endif
#endif /* KILN_PERSIST_H */
