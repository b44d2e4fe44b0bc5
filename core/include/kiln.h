/* kiln.h: the whole public C API of the kiln core (world, entities, components, queries).
 * Needs only the C standard headers; every function is prefixed kiln_ and every type kiln_. */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   kiln_world_create, kiln_world_destroy, kiln_world_atfini, kiln_world_atfini_get, kiln_world_error,
 *   kiln_world_clear_error, kiln_world_stats_get, kiln_world_trim, kiln_archetype_exists, kiln_world_entities,
 *   kiln_result_name, kiln_type_name, kiln_type_size, kiln_tick_current, kiln_tick_epoch, kiln_tick_advance,
 *   kiln_entity_index, kiln_entity_generation, kiln_entity_make, kiln_spawn, kiln_spawn_with, kiln_spawn_batch,
 *   kiln_despawn, kiln_despawn_unless, kiln_unspawn, kiln_is_alive, kiln_entity_count, kiln_entity_format,
 *   kiln_entity_components, kiln_component_register, kiln_component_lookup, kiln_component_info_get,
 *   kiln_component_count, kiln_component_check, kiln_add, kiln_remove, kiln_has, kiln_get, kiln_get_mut, kiln_set,
 *   kiln_changed_tick, kiln_get_many, kiln_getter_init, kiln_getter_fini, kiln_getter_check, kiln_getter_get,
 *   kiln_getter_get_many, kiln_query_create, kiln_query_destroy, kiln_query_count, kiln_query_bytes, kiln_query_memory,
 *   kiln_query_archetype_count, kiln_query_iter, kiln_query_next, kiln_iter_fini, kiln_iter_range, kiln_iter_column,
 *   kiln_iter_mark_changed, kiln_iter_mark_rows, kiln_iter_changed_since, kiln_iter_row_tick, kiln_iter_column_tick,
 *   kiln_commands_create, kiln_commands_destroy, kiln_commands_spawn, kiln_commands_spawn_with, kiln_commands_despawn,
 *   kiln_commands_add, kiln_commands_add_sized, kiln_commands_set, kiln_commands_remove, kiln_commands_emit,
 *   kiln_commands_apply, kiln_commands_skip, kiln_commands_clear, kiln_commands_count, kiln_commands_resolve,
 *   kiln_commands_error, kiln_is_placeholder, kiln_defer_begin, kiln_defer_end, kiln_defer_clear, kiln_is_deferred,
 *   kiln_world_dropped, kiln_world_drop_hook_set, kiln_jobs_create, kiln_jobs_destroy, kiln_jobs_worker_count,
 *   kiln_jobs_submit, kiln_jobs_wait, kiln_parallel_for, kiln_schedule_create, kiln_schedule_destroy,
 *   kiln_schedule_add, kiln_schedule_remove, kiln_schedule_replace, kiln_schedule_build, kiln_schedule_run,
 *   kiln_schedule_stage_count, kiln_schedule_system_count, kiln_schedule_system_info_get, kiln_schedule_find,
 *   kiln_schedule_enable, kiln_schedule_describe, kiln_event_register, kiln_event_lookup, kiln_event_info_get,
 *   kiln_event_emit, kiln_event_count, kiln_event_get, kiln_events_update, kiln_resource_set, kiln_resource_get,
 *   kiln_resource_has, kiln_resource_remove.
 *
 * Naming: kiln_<object>_<verb> (kiln_query_create); the object is left out for entities
 * (kiln_add, kiln_get). A function that copies something out of an object ends in _get,
 * whether it returns a borrowed pointer (kiln_get, kiln_resource_get, kiln_event_get) or fills
 * a caller's struct (kiln_world_stats_get, kiln_component_info_get); one that returns a plain
 * property is named by it alone (kiln_world_error, kiln_entity_count, kiln_tick_current).
 *
 * Messages: every failing call on a world leaves "kiln_<function>: <detail>" in kiln_world_error,
 * e.g. "kiln_despawn: entity 0v1 is not alive"; entities print as index v generation ("12v3"). */

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

/* ---- Basic types ------------------------------------------------------------------------ */

/* An entity handle: the low 32 bits are the slot index, the 21 bits above them the slot's generation (1 .. 2^21-1).
 * Handles are below 2^53, so Lua numbers and doubles carry them exactly. 0 (KILN_NULL_ENTITY) is never alive. A slot
 * whose generation would wrap is retired for good, so a stale handle can never come back to life. */
typedef uint64_t kiln_entity;
#define KILN_NULL_ENTITY ((kiln_entity)0)
#define KILN_ENTITY_INDEX_BITS 32
#define KILN_ENTITY_GENERATION_BITS 21
#define KILN_ENTITY_GENERATION_MAX ((uint32_t)((1u << KILN_ENTITY_GENERATION_BITS) - 1u))

/* The slot index of an entity handle (its low 32 bits). */
static inline uint32_t kiln_entity_index(kiln_entity entity) { return (uint32_t)(entity & 0xffffffffu); }

/* The generation of an entity handle (21 bits above the index). */
static inline uint32_t kiln_entity_generation(kiln_entity entity) {
    return (uint32_t)((entity >> 32) & KILN_ENTITY_GENERATION_MAX);
}

/* The handle of a slot index and generation. */
static inline kiln_entity kiln_entity_make(uint32_t index, uint32_t generation) {
    return ((uint64_t)(generation & KILN_ENTITY_GENERATION_MAX) << 32) | index;
}

/* A component id: 1 .. kiln_component_count(world). 0 (KILN_NO_COMPONENT) is never a component. */
typedef uint32_t kiln_component;
#define KILN_NO_COMPONENT ((kiln_component)0)

/* An event type: a handle of its own type, so an event type cannot be passed where a
 * component is expected or the other way round (the compiler refuses it). id runs from 1 to
 * the number of registered event types; {0} is never an event type. */
typedef struct kiln_event_type { uint32_t id; } kiln_event_type;

/* A change tick. The world tick starts at 1; rows written during tick t carry t. 64 bits. */
typedef uint64_t kiln_tick;

/* A row's tick as stored (`it.ticks[term][row]`, read with kiln_iter_row_tick): tick - tick
 * base. At KILN_TICK_REBASE_AT past the base, kiln_tick_advance moves it to KILN_TICK_WINDOW
 * behind the tick, open iterations or not; older rows read as the base (false changes, never
 * a missed one), as do marks of an older iteration; a delta kept across it reads later. */
typedef uint16_t kiln_row_tick;
#define KILN_TICK_WINDOW 32768u
#define KILN_TICK_REBASE_AT 49152u

typedef struct kiln_world kiln_world;
typedef struct kiln_query kiln_query;
typedef struct kiln_commands kiln_commands;

/* Every fallible call returns one of these; on failure the world is unchanged and
 * kiln_world_error() says what went wrong, naming the call, entity and component. */
typedef enum kiln_result {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT, /* a malformed desc or argument */
    KILN_ERR_DEAD_ENTITY,      /* null, stale or out-of-range entity */
    KILN_ERR_MISSING_COMPONENT,/* the entity does not have the component */
    KILN_ERR_UNKNOWN_COMPONENT,/* the id is not a component of this world */
    KILN_ERR_LAYOUT_MISMATCH,  /* a name registered again with another layout */
    KILN_ERR_OUT_OF_MEMORY,    /* the allocator hook returned NULL */
    KILN_ERR_LIMIT,            /* a hard limit is reached: 2^32-1 entity slots, 65,472 archetypes, 2^27
                                  (134,217,728) entities in one archetype, 256 components on one entity */
    KILN_ERR_UNKNOWN_EVENT     /* the event type is not registered in this world */
} kiln_result;

/* The allocator hook, with the contract of lua_Alloc: nsize == 0 frees ptr (which may be NULL)
 * and returns NULL; otherwise it returns a block of nsize bytes (or NULL on failure, leaving ptr
 * untouched) holding the first min(osize, nsize) bytes of ptr. When ptr is NULL, osize carries
 * no information. Blocks must be 8-byte aligned, as malloc's are (kiln aligns values to 16
 * itself): debug builds assert it, and kiln_world_create refuses a misaligned one. */
typedef void *(*kiln_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

/* ---- World ------------------------------------------------------------------------------ */

typedef struct kiln_world_desc {
    kiln_alloc_fn alloc;   /* NULL: the C library's realloc/free */
    void *alloc_ud;        /* handed to alloc */
} kiln_world_desc;

/* Creates a world. desc may be NULL (all defaults). Returns NULL only when the allocator cannot
 * provide the world itself, or misaligns it. Worlds share nothing; several may live in a process. */
kiln_world *kiln_world_create(const kiln_world_desc *desc);

/* Destroys the world. In order: runs the kiln_world_atfini hooks (last registered first, the world whole; one a hook
 * registers runs too; one that ran is gone for kiln_world_atfini_get, so later hooks find its addon uninitialised),
 * detaches every command buffer still recorded against it (pending values destroyed; the buffers stay valid for
 * kiln_commands_destroy only), runs the destroy hook of every live and queued value, then of every resource, each
 * finding every row and query in place (to read; resource hooks may remove resources, not set one), then frees all.
 * NULL: no-op. Asserts while a schedule lives or runs, a loop iterates, from its own hook; release builds refuse
 * each, doing nothing, the reason in kiln_world_error (a hook can read it). Every query and pointer dies. */
void kiln_world_destroy(kiln_world *world);

/* A teardown hook: runs once when its world is destroyed, before anything is freed. */
typedef void (*kiln_fini_fn)(kiln_world *world, void *ctx);

/* Registers fn to run with ctx when world is destroyed (as flecs' ecs_atfini): an addon keeps its state as ctx and
 * finds it with kiln_world_atfini_get, so the core never names it. A main-thread system may register mid-stage. Same
 * fn twice, once the destroy ran the hooks (from a value's destroy hook), or from a worker system, job or thread while
 * a stage runs: KILN_ERR_INVALID_ARGUMENT, nothing registered; out of memory: KILN_ERR_OUT_OF_MEMORY. */
kiln_result kiln_world_atfini(kiln_world *world, kiln_fini_fn fn, void *ctx);

/* The ctx registered with fn, or NULL. Any thread, no lock: one registered meanwhile is absent or whole (ctx too). */
void *kiln_world_atfini_get(const kiln_world *world, kiln_fini_fn fn);

/* The message of the calling thread's last failed call on this world ("" when none; while a schedule runs,
 * each thread and system has its own). Owned by the world, valid until that thread's next failure or clear. */
const char *kiln_world_error(const kiln_world *world);
void kiln_world_clear_error(kiln_world *world);

/* A constant English name for a result code, e.g. "dead entity". */
const char *kiln_result_name(kiln_result result);

typedef struct kiln_world_stats {
    int64_t entities;      /* live entities */
    int64_t entity_slots;  /* slots ever used (live + free + retired) */
    int32_t archetypes;    /* archetypes created, the empty one included */
    int32_t components, queries; /* registered component types, live queries */
    int64_t bytes;         /* bytes the world holds through the hook (see "Allocator": not its holders' objects) */
    int64_t allocations;   /* calls to the allocator hook that allocated or resized */
    uint64_t changes;      /* grows with each row added or removed: a count taken at one value holds */
} kiln_world_stats;

void kiln_world_stats_get(const kiln_world *world, kiln_world_stats *dest);

/* Whether the world holds the archetype of exactly the count components in types (ascending, none
 * twice): a spawn of just them, or an add or remove that leaves an entity with them, makes none. */
bool kiln_archetype_exists(const kiln_world *world, const kiln_component *types, int32_t count);

/* Shrinks each archetype holding under a quarter of its room to twice its rows (an empty one of
 * rows over 4 KiB to none) and frees empty event buffers: the bytes freed, 0 while deferred or
 * iterating. Structural; kiln_schedule_run calls it after a frame the world grew by half+16 MiB. */
int64_t kiln_world_trim(kiln_world *world);

/* Lists live entities for tooling: writes up to capacity handles to dest (dest NULL with capacity
 * > 0: -1, the world error) and returns the number of live entities, so a first call with capacity 0 sizes
 * the buffer. Order: by archetype, then row. From a hook mid-move, as kiln_entity_count too. */
int64_t kiln_world_entities(const kiln_world *world, kiln_entity *dest, int64_t capacity);

/* The current world tick (starts at 1), the times a snapshot restore took it back (books kept per
 * tick are new when the epoch changes), and its increment. kiln_tick_advance returns the new tick; from a
 * running system that is not exclusive it is refused (0, the world error); at KILN_TICK_MAX (2^53 - 1, the
 * most a save holds) it fails: 0 and the world error. May rebase row ticks (see kiln_row_tick). */
#define KILN_TICK_MAX 0x1fffffffffffffull
kiln_tick kiln_tick_current(const kiln_world *world);
uint64_t kiln_tick_epoch(const kiln_world *world);
kiln_tick kiln_tick_advance(kiln_world *world);

/* ---- Components ------------------------------------------------------------------------- */

/* Field types for reflection. */
typedef enum kiln_type {
    KILN_TYPE_NONE = 0, KILN_TYPE_BOOL,
    KILN_TYPE_INT8, KILN_TYPE_INT16, KILN_TYPE_INT32, KILN_TYPE_INT64,
    KILN_TYPE_UINT8, KILN_TYPE_UINT16, KILN_TYPE_UINT32, KILN_TYPE_UINT64,
    KILN_TYPE_FLOAT, KILN_TYPE_DOUBLE, KILN_TYPE_ENTITY,
    KILN_TYPE_CHAR,   /* a fixed-size char array: count is its length, NUL included */
    KILN_TYPE_VEC2, KILN_TYPE_VEC3, KILN_TYPE_VEC4, KILN_TYPE_QUAT, KILN_TYPE_MAT4,
    KILN_TYPE_COUNT
} kiln_type;

/* The constant name of a type ("float", "vec3", ...) and its size in bytes (0 for NONE). */
const char *kiln_type_name(kiln_type type);
size_t kiln_type_size(kiln_type type);

typedef struct kiln_field {
    const char *name;  /* unique within the component */
    kiln_type type;
    uint32_t offset;   /* byte offset in the component */
    uint32_t count;    /* array length; 0 means 1 */
} kiln_field;

/* Hooks for components that own resources. ptr points at count consecutive values (stride
 * apart). destroy releases values; move constructs dst from src, after which src is dead and
 * its destroy hook is not run; without one rows move bytewise. Called mid-change (a moving entity
 * sits in two rows; kiln_world_entities, kiln_query_count, _bytes and loops see it once), a spawn,
 * despawn, add, remove, set or apply (a deferred one queues) or a kiln_persist.h save, export or
 * hash (0) from one fails with KILN_ERR_INVALID_ARGUMENT; resources may change (kiln_resource_remove). */
typedef void (*kiln_destroy_fn)(void *ptr, int32_t count, void *ctx);
typedef void (*kiln_move_fn)(void *dst, void *src, int32_t count, void *ctx);

/* A check hook: decides whether value may become entity's value of the component. It returns KILN_OK to accept;
 * anything else refuses, and the calling function fails with that code, the world unchanged and the message
 * "kiln_<function>: <why>" (write why, a NUL-terminated sentence of at most why_size bytes). value is the value given,
 * else the component's defaults, else NULL (all zeroes). entity is KILN_NULL_ENTITY for a spawn or a resource. The hook
 * reads the world but must not change it (a change it makes fails, as from a destroy hook); it runs on the caller's
 * thread, so a system calling declares what it reads ("Declared access"). It runs in kiln_add, kiln_set,
 * kiln_spawn_with, kiln_spawn_batch, kiln_resource_set, kiln_load and kiln_commands_apply (in deferred sections when a
 * call is queued and again when it lands, a refused change dropped); pointer writes are not checked
 * (kiln_component_check). */
typedef kiln_result (*kiln_check_fn)(const kiln_world *world, kiln_entity entity,
                                     const void *value, void *ctx, char *why, size_t why_size);

#define KILN_MAX_FIELDS 64
#define KILN_MAX_NAME 63

typedef struct kiln_component_desc {
    const char *name;        /* required, 1..63 bytes, unique in the world */
    size_t size;             /* 0: a tag */
    size_t align;            /* 0: 1 for tags, else the largest power of two <= 16 dividing size;
                                must be a power of two and at most 16 */
    const kiln_field *fields;/* optional reflection, field_count entries, copied */
    int32_t field_count;
    kiln_destroy_fn destroy; /* optional */
    kiln_move_fn move;       /* optional */
    kiln_check_fn check;     /* optional: refuses values (see kiln_check_fn) */
    void *hook_ctx;          /* handed to the hooks */
    const void *defaults;    /* optional, size bytes, copied: the value a component gets when
                                none is given (kiln_add or kiln_set with NULL, kiln_spawn_with
                                without a value, kiln_spawn_batch, command buffers, resources,
                                events); NULL: zeroes. Bitwise copied, so it must own nothing. */
    bool owner;              /* an owner mark (a tag saying whose an entity is): see kiln_persist.h */
} kiln_component_desc;

/* Registers a component type and writes its id to dest. Registering a name again with the same
 * size, alignment, fields, destroy and move hooks, hook_ctx and owner returns the existing id
 * when check and defaults are the registered ones or left NULL (NULL takes what is registered);
 * else KILN_ERR_LAYOUT_MISMATCH, naming the first difference. The desc (names and defaults
 * included) is copied. Fails with KILN_ERR_INVALID_ARGUMENT for a bad name, an alignment above
 * 16 or not a power of two, a field outside the component, a duplicate field name, a tag (size
 * 0) with fields, hooks or defaults, or an owner mark with a size. A main-thread system may register while worker
 * systems run (they see a new type unknown or whole); a worker system, job or thread is refused, nothing changed. */
kiln_result kiln_component_register(kiln_world *world, const kiln_component_desc *desc, kiln_component *dest);

/* The id registered under name, or KILN_NO_COMPONENT. */
kiln_component kiln_component_lookup(const kiln_world *world, const char *name);

typedef struct kiln_component_info {
    kiln_component id;
    const char *name;
    size_t size;
    size_t align;
    size_t stride;           /* size rounded up to align */
    const kiln_field *fields;
    int32_t field_count;
    bool has_destroy, has_move, has_check;
    const void *defaults;    /* size bytes, or NULL when the defaults are zeroes */
    bool owner;              /* an owner mark (kiln_component_desc) */
} kiln_component_info;

/* Fills dest with the component's description; pointers in it are owned by the world and
 * live as long as the world. Returns false (dest untouched) for an unknown id. */
bool kiln_component_info_get(const kiln_world *world, kiln_component component,
                             kiln_component_info *dest);

/* Number of registered components; ids run from 1 to this number. */
int32_t kiln_component_count(const kiln_world *world);

/* Runs component's check hook on value (NULL: the defaults) for entity, as kiln_add and kiln_set
 * do, for code that writes values in place (a binding filling kiln_get_mut's pointer). KILN_OK
 * when the component has no hook or the hook accepts; otherwise the hook's code, with the message
 * "kiln_component_check: <why>". KILN_ERR_UNKNOWN_COMPONENT for an unknown id. Changes nothing. */
kiln_result kiln_component_check(kiln_world *world, kiln_entity entity, kiln_component component, const void *value);

/* ---- Entities --------------------------------------------------------------------------- */

/* Spawns an entity with no components (it lives in the empty archetype). Writes the handle
 * to dest (which may be NULL). Fails only for out of memory or exhausted slots. */
kiln_result kiln_spawn(kiln_world *world, kiln_entity *dest);

/* Spawns an entity with count components at once (one archetype move, no intermediate archetypes).
 * values[i] is the initial value of components[i], bitwise copied (the world takes over whatever
 * it owns); NULL gives the component's defaults. values may be NULL. Duplicate or unknown
 * components fail with nothing spawned. Rows are stamped with the current tick. dest may be NULL. */
kiln_result kiln_spawn_with(kiln_world *world, const kiln_component *components,
                            const void *const *values, int32_t count, kiln_entity *dest);

/* Spawns n entities that all have the given components with their defaults, sizing storage
 * once. Writes the n handles to dest (which may be NULL). On failure nothing is spawned.
 * Fill values afterwards through a query or kiln_get_mut. */
kiln_result kiln_spawn_batch(kiln_world *world, const kiln_component *components,
                             int32_t count, int32_t n, kiln_entity *dest);

/* Despawns a live entity (destroy hooks run, its row swap-removed); dead: KILN_ERR_DEAD_ENTITY. _unless: refused
 * while it holds one of keep (count, copied; 0: none; < 0, or keep NULL: refused too): KILN_ERR_INVALID_ARGUMENT
 * "entity 5v1 holds Hull"; deferred, checked again as it lands, a refusal dropped then (kiln_world_dropped). */
kiln_result kiln_despawn(kiln_world *world, kiln_entity entity);
kiln_result kiln_despawn_unless(kiln_world *world, kiln_entity entity, const kiln_component *keep, int32_t count);

/* kiln_despawn taking back, latest first, spawns a failed step just made whose handles went nowhere:
 * the slot goes back as it was, so the next spawns get the same handles. Deferred: as kiln_despawn. */
kiln_result kiln_unspawn(kiln_world *world, kiln_entity entity);

/* True for a live entity; false for null, stale and out-of-range handles. Never an error. */
bool kiln_is_alive(const kiln_world *world, kiln_entity entity);

/* Number of live entities. */
int64_t kiln_entity_count(const kiln_world *world);

/* Lists the components of a live entity for tooling: writes up to capacity ids (ascending) to dest
 * and returns how many it has; -1 when not alive, or dest NULL with capacity > 0 (the world error). */
int32_t kiln_entity_components(const kiln_world *world, kiln_entity entity, kiln_component *dest, int32_t capacity);

/* Writes a handle as "12v3" (index v generation; a number from 2^53 up, in decimal) to buf (24 bytes); returns buf. */
char *kiln_entity_format(kiln_entity entity, char *buf, size_t size);

/* ---- Component access ------------------------------------------------------------------- */

/* Adds component to entity with a bitwise copy of value (NULL: the component's defaults),
 * moving the entity to the neighbouring archetype. If the entity already has it, the old value is
 * destroyed and replaced in place (no move). Either way the row is stamped changed. */
kiln_result kiln_add(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value);

/* Removes component from entity, running its destroy hook. Writes whether it was there to
 * removed (which may be NULL). Removing an absent component is not an error. Removing the
 * last component leaves the entity alive in the empty archetype. */
kiln_result kiln_remove(kiln_world *world, kiln_entity entity, kiln_component component, bool *removed);

/* True when entity is alive and has component. Never an error. */
bool kiln_has(const kiln_world *world, kiln_entity entity, kiln_component component);

/* A read-only pointer to the entity's value, or NULL when the entity is dead or lacks it
 * (tags have no value: NULL too; use kiln_has). Borrowed: valid until the next structural
 * change (spawn, despawn, add of a new component, remove) or world destroy. */
const void *kiln_get(const kiln_world *world, kiln_entity entity, kiln_component component);

/* Writes to dest[i] what kiln_get(world, entities[i], component) answers, for every i below
 * count, and returns how many of them are not NULL. For scattered handles it is faster than
 * count calls: it requests the records of a few dozen handles at a time before reading any, so
 * their cache misses overlap. Same lifetime and thread rules as kiln_get. count must not be
 * negative (debug builds assert; release builds write nothing and return 0). */
int32_t kiln_get_many(const kiln_world *world, const kiln_entity *entities, int32_t count,
                      kiln_component component, const void **dest);

/* Like kiln_get but writable; stamps the row changed at the current tick. NULL when absent,
 * and then kiln_world_error says why. Same lifetime as kiln_get. */
void *kiln_get_mut(kiln_world *world, kiln_entity entity, kiln_component component);

/* Overwrites an existing value (old value destroyed, value bitwise copied; NULL: the
 * component's defaults) and stamps the row changed. Fails with KILN_ERR_MISSING_COMPONENT when the entity lacks it. */
kiln_result kiln_set(kiln_world *world, kiln_entity entity, kiln_component component, const void *value);

/* The tick at which entity's component was last written, or 0 when absent (see kiln_row_tick). */
kiln_tick kiln_changed_tick(const kiln_world *world, kiln_entity entity, kiln_component component);

/* A prepared getter (fields private): kiln_getter_get answers kiln_get inline, until the
 * next structural change (debug builds assert). See "Prepared getters" in docs/c-api.md. */
typedef struct kiln_getter { /* pages: the world's slot records, 4096 a page, each a word of
    * generation << 43 | archetype << 27 | row (dead and reserved slots: archetype >= count);
    * data and strides by archetype (NULL and 0 where it lacks the component), one block (alloc's) */
    const uint64_t *const *pages; uint64_t archetype_count; /* 64 bits: compared as is */
    const uint8_t *const *data; const size_t *strides; uint32_t slot_count;
    kiln_component component; kiln_world *world; uint64_t version; kiln_alloc_fn alloc; void *alloc_ud; } kiln_getter;
/* Init fails with KILN_ERR_UNKNOWN_COMPONENT or KILN_ERR_OUT_OF_MEMORY (dest then needs no fini); fini (before
 * or after the world's destroy) on NULL, a zeroed or a finished one is a no-op; check asserts it is not stale. */
kiln_result kiln_getter_init(kiln_world *world, kiln_component component, kiln_getter *dest);
void kiln_getter_fini(kiln_getter *getter);
void kiln_getter_check(const kiln_getter *getter);
/* kiln_get_many through a getter: dest[i] = kiln_getter_get(getter, entities[i]), records
 * requested a block ahead; returns how many are not NULL (count < 0 asserts; a stale getter: debug
 * asserts, release gives 0, dest all NULL, the world error). Pointers valid as the getter's. */
int32_t kiln_getter_get_many(const kiln_getter *getter, const kiln_entity *entities, int32_t count, const void **dest);
/* What kiln_get(world, entity, component) answers (tags: NULL). */
static inline const void *kiln_getter_get(const kiln_getter *getter, kiln_entity entity) {
#ifndef NDEBUG
    kiln_getter_check(getter);
#endif
    uint32_t index = (uint32_t)entity;
    if (index >= getter->slot_count) return NULL;
#ifdef __GNUC__ /* relaxed atomic: a main-thread system may reserve a slot meanwhile */
    uint64_t record = __atomic_load_n(&getter->pages[index >> 12][index & 4095u], __ATOMIC_RELAXED);
#else
    uint64_t record = getter->pages[index >> 12][index & 4095u];
#endif
    /* place is the archetype when the handle's whole high half is the slot's generation (any
     * other bit puts it at 2^16 or more); dead and reserved slots read beyond the count */
    uint64_t place = (record >> 27) ^ ((entity >> 32) << 16);
    if (place >= getter->archetype_count) return NULL;
    return (const void *)((uintptr_t)getter->data[place] /* lacking: NULL + row * 0 */
                          + (size_t)(record & 0x7ffffffu) * getter->strides[place]);
}

/* ---- Queries ---------------------------------------------------------------------------- */

#define KILN_QUERY_MAX_TERMS 16

/* Terms are zero-terminated lists (unused slots stay KILN_NO_COMPONENT, as designated
 * initializers leave them). Column order in an iterator: with[] terms, then optional[] terms. */
typedef struct kiln_query_desc {
    kiln_component with[KILN_QUERY_MAX_TERMS];
    kiln_component without[KILN_QUERY_MAX_TERMS];
    kiln_component optional[KILN_QUERY_MAX_TERMS];
} kiln_query_desc;

/* Creates a cached query and writes it to dest. It matches the existing archetypes once, then
 * each one made later, and visits them by their component ids, not by when they were made (a
 * loaded or restored world visits its rows as the original did). Fails for unknown or repeated
 * components and an empty with[]. Main thread only: a worker system, job or thread is refused while a stage
 * runs, creating or destroying (a worker system aborts first in debug builds, see "Declared access"). */
kiln_result kiln_query_create(kiln_world *world, const kiln_query_desc *desc, kiln_query **dest);

/* Destroys a query. NULL is a no-op. While it iterates (others may), refused: kept, with the world error. */
void kiln_query_destroy(kiln_query *query);

/* Entities the query matches now; the bytes their rows take (values, ticks, handles, records); the
 * bytes it holds, which grow with the archetypes it matches; how many those are (O(1), empty ones too). */
int64_t kiln_query_count(const kiln_query *query);
int64_t kiln_query_bytes(const kiln_query *query);
int64_t kiln_query_memory(const kiln_query *query);
int32_t kiln_query_archetype_count(const kiln_query *query);

/* An iterator over one chunk at a time: a run of rows of one archetype. All fields are read-only
 * for users. columns[i] is the base pointer of term i (NULL for an optional term the archetype
 * lacks, and for tags); entities[row] is the row's handle. Pointers are borrowed until it ends. */
typedef struct kiln_iter {
    int32_t count;                  /* rows in this chunk */
    int32_t term_count;             /* with + optional terms */
    const kiln_entity *entities;    /* count handles */
    void *columns[KILN_QUERY_MAX_TERMS * 2];
    kiln_row_tick *ticks[KILN_QUERY_MAX_TERMS * 2]; /* per-row change ticks, or NULL */
    kiln_tick tick;                 /* the world tick the iteration runs at */
    const kiln_tick *tick_base;     /* ticks count from it; read-only, moves (kiln_row_tick) */
    /* private */
    kiln_world *world;
    const kiln_query *query;
    void *archetype;
    int32_t next_index;
    int32_t offset;
    uint64_t marked;                /* terms marked (not a kiln_tick: kept in a register) */
    uint64_t mark_tick;             /* tick again, as a type no per-row tick store can alias
                                       (nor the base): a marking loop loads both once */
    bool active, owns_lock; kiln_result ended; /* ended: how its end went (kiln_iter_fini) */
    uint16_t era_high; uint32_t era; /* the world's iteration era at its start, 48 bits (kiln_iter_fini) */
} kiln_iter;

/* Starts iterating. While one is active the world is deferred (kiln_defer_begin): spawn, despawn, add,
 * remove and set in the loop are queued until the outermost iteration ends, so the rows visited never
 * move; applying a command buffer meanwhile asserts. Iterate with kiln_query_next until false, or stop
 * early with kiln_iter_fini (one left open keeps the world deferred; a system's fails its schedule run,
 * which ends it for good: then next returns false and fini does nothing). */
void kiln_query_iter(const kiln_query *query, kiln_iter *it);

/* Moves to the next non-empty chunk; false when done, the iteration ended. kiln_iter_fini ends one
 * early (nothing on one a run ended) and returns how its end went, also once next ended it: the
 * outermost end applies the loop's changes and fails as kiln_defer_end (the rest stays queued). */
bool kiln_query_next(kiln_iter *it);
kiln_result kiln_iter_fini(kiln_iter *it);

/* Writes to dest a view of rows [begin, end) of the chunk in it, for splitting one archetype
 * among threads (rows outside the chunk, or none current: an empty view, the world error). It shares the
 * iteration (kiln_query_next on it: a contract, debug asserts); rows it marks land at its kiln_iter_fini. */
void kiln_iter_range(const kiln_iter *it, int32_t begin, int32_t end, kiln_iter *dest);

/* Base pointer of term's column in the current chunk, or NULL. */
static inline void *kiln_iter_column(const kiln_iter *it, int32_t term) {
    return it->columns[term];
}

/* Stamps row of term changed at the iteration's tick (the base, when that is newer). */
static inline void kiln_iter_mark_changed(kiln_iter *it, int32_t term, int32_t row) {
    uint64_t base = *it->tick_base;
    it->ticks[term][row] = (kiln_row_tick)(it->mark_tick > base ? it->mark_tick - base : 0);
    it->marked |= (uint64_t)1 << term;
}

/* kiln_iter_mark_changed for rows [begin, end) of term, in vector stores: one call after a loop writing
 * the chunk. Contract (unchecked in release, for speed; debug asserts): rows in it, a term with a column. */
void kiln_iter_mark_rows(kiln_iter *it, int32_t term, int32_t begin, int32_t end);

/* The tick at which row of term was last written (see kiln_row_tick), 0 without ticks. */
static inline kiln_tick kiln_iter_row_tick(const kiln_iter *it, int32_t term, int32_t row) {
    return it->ticks[term] != NULL ? *it->tick_base + it->ticks[term][row] : 0;
}

/* True when row of term was written after tick (strictly greater; see kiln_row_tick). */
static inline bool kiln_iter_changed_since(const kiln_iter *it, int32_t term, int32_t row,
                                           kiln_tick tick) {
    return it->ticks[term] != NULL && (kiln_tick)(*it->tick_base + it->ticks[term][row]) > tick;
}

/* The latest tick written anywhere in term's column of the current chunk (0 when the term is absent; and
 * for a term outside the query, the world error), so a system can skip an unchanged chunk unread. */
kiln_tick kiln_iter_column_tick(const kiln_iter *it, int32_t term);

/* ---- Command buffers -------------------------------------------------------------------- */

/* A command buffer records spawns, despawns, adds, sets and removes and applies them later,
 * in order. Recording never touches the world: it only reads the component registry (for
 * value sizes and hooks), so each thread may fill its own buffer while systems iterate, even
 * while a main-thread system registers components. One buffer is never shared between threads.
 * A buffer allocates through its world's allocator hook (thread-safe then, as the default is)
 * with its own accounting. It keeps its memory across applies (reused alike, it allocates
 * nothing); room past 4x a batch's use goes back at its next complete apply or idle frame. */

/* Placeholders stand for entities a buffer will spawn. They are never valid entities (bit 62 is set, far above any
 * handle), and only the batch that made them accepts them: its tag is never reused in the world (2^38 tags, then
 * KILN_ERR_LIMIT; 2^24 spawns per batch). A placeholder may also be recorded inside a value (add, set, emit): the
 * apply rewrites every KILN_TYPE_ENTITY field (arrays too) of the component's or event type's reflection that holds
 * a placeholder of the current batch to the entity its spawn became, before the check hook sees the value; so a
 * Parent naming the parent's placeholder links the two. Fields not reflected are copied as recorded. A placeholder
 * that cannot be rewritten at the command's turn (guessed: its spawn comes later in the buffer; its spawn dropped or
 * skipped; of another batch or buffer) fails that command with KILN_ERR_INVALID_ARGUMENT and a message naming the
 * field, the value left as recorded: a later apply stops there again until it is skipped or the buffer cleared. A
 * system's buffer and the deferred queue drop it instead (a placeholder's bits never land), and drop a spawn whole,
 * with the adds directly following it for its placeholder (any number: up to 256 land with it in one move), when one
 * of those cannot land (an unknown component or size, its check's refusal, a limit its move meets), then the
 * commands aimed at it later; one of those refused once the spawn landed is dropped alone. */
#define KILN_PLACEHOLDER_BIT ((uint64_t)1 << 62)
static inline bool kiln_is_placeholder(kiln_entity entity) { return (entity & KILN_PLACEHOLDER_BIT) != 0; }

/* Creates an empty buffer for world's components. NULL (and the world error) when out of memory. Create and
 * destroy buffers on the thread that owns the world (the world keeps a list of them). */
kiln_commands *kiln_commands_create(kiln_world *world);

/* Destroys the buffer; values still in it are destroyed (their destroy hooks run once).
 * NULL is a no-op. Either order of destruction is safe: a buffer destroyed after its world
 * (which detached it) only frees itself. Asserts (release: refused, kept) while the buffer is being applied (a call
 * from a hook its apply runs), and for a system's ctx->commands (its schedule owns it). */
void kiln_commands_destroy(kiln_commands *cmd);

/* Records a spawn and writes a placeholder for the new entity to dest. */
kiln_result kiln_commands_spawn(kiln_commands *cmd, kiln_entity *dest);
/* kiln_commands_spawn, then kiln_commands_add of count (<= 256) distinct registered components
 * with values[i] (values or values[i] NULL: defaults), all or nothing: a failure takes no value. */
kiln_result kiln_commands_spawn_with(kiln_commands *cmd, const kiln_component *components,
                                     void *const *values, int32_t count, kiln_entity *dest);

/* Records a despawn of an entity or placeholder. */
kiln_result kiln_commands_despawn(kiln_commands *cmd, kiln_entity entity);

/* Records an add (or replace) of component with value; NULL value zero-initialises. The buffer takes the
 * value over: it is moved in through the component's move hook when there is one (the caller's object is then
 * moved-from), else copied bytewise; until applied the buffer owns it and clearing or destroying the buffer
 * runs its destroy hook once. Fails for a component the world does not know (use kiln_commands_add_sized). */
kiln_result kiln_commands_add(kiln_commands *cmd, kiln_entity entity, kiln_component component,
                              void *value);

/* Like kiln_commands_add with the value's size given, so the component may be registered
 * later, before the apply (which fails if the world then lacks it or its size differs). */
kiln_result kiln_commands_add_sized(kiln_commands *cmd, kiln_entity entity,
                                    kiln_component component, void *value, size_t size);

/* Records a set: overwrite an existing component (an apply fails if it is absent). */
kiln_result kiln_commands_set(kiln_commands *cmd, kiln_entity entity, kiln_component component,
                              void *value);

/* Records a remove; removing an absent component is a no-op when applied. */
kiln_result kiln_commands_remove(kiln_commands *cmd, kiln_entity entity, kiln_component component);

/* Records an event emit (value copied; NULL: the type's defaults); it lands when the buffer
 * is applied, in order. KILN_ERR_UNKNOWN_EVENT for a type the world does not know. */
kiln_result kiln_commands_emit(kiln_commands *cmd, kiln_event_type type, const void *value);

/* Applies the commands in order to world (the buffer's world), stamping written rows with the current tick; writes how
 * many were applied to applied (may be NULL). A despawn of a dead entity is skipped silently (and counted); a remove of
 * an absent component is a no-op. An add, set or remove aimed at a dead entity, a set of an absent component, an add of
 * a component the world does not know, a value holding a placeholder that cannot be rewritten or refused by its check
 * hook, a limit or out of memory fails with the world error: those before it landed and left the buffer; it and those
 * after it stay, owning their values, and a later apply goes on with them (placeholders spawned keep their entities)
 * unless kiln_commands_skip gives it up. Refused while a query of world iterates or from a running system that is not
 * exclusive: nothing applied. What a hook it runs records into the buffer lands in it too. */
kiln_result kiln_commands_apply(kiln_commands *cmd, kiln_world *world, int64_t *applied);

/* kiln_commands_clear discards every pending command, destroying their values once. kiln_commands_skip discards the
 * first (where a failed apply stopped; a spawn with the adds it holds), its value destroyed, writing how many went to
 * skipped (may be NULL; 0: none pending); from a hook its apply runs, neither drops any (the world error; skip:
 * KILN_ERR_INVALID_ARGUMENT). Commands aimed at a skipped spawn then fail. kiln_commands_count: pending. */
void kiln_commands_clear(kiln_commands *cmd);
kiln_result kiln_commands_skip(kiln_commands *cmd, int64_t *skipped);
int64_t kiln_commands_count(const kiln_commands *cmd);

/* The entity a placeholder of this buffer became, or KILN_NULL_ENTITY when its spawn has not
 * been applied yet or the placeholder is not from this buffer's current batch. A batch's
 * placeholders resolve until the buffer records again after a complete apply, or is cleared. */
kiln_entity kiln_commands_resolve(const kiln_commands *cmd, kiln_entity placeholder);

/* The message of the buffer's last failed recording ("" when none), e.g. "kiln_commands_add: ...". */
const char *kiln_commands_error(const kiln_commands *cmd);

/* ---- Deferred world --------------------------------------------------------------------- */

/* Between kiln_defer_begin and kiln_defer_end, kiln_spawn*, kiln_despawn, kiln_add, kiln_remove and
 * kiln_set are checked at once (a dead entity or unknown component still fails right away) but queued
 * instead of executed; the outermost kiln_defer_end applies the queue in order. Sections nest. While deferred:
 *  - spawn returns a real handle at once; the entity is reserved, accepts adds, and is alive when the section ends;
 *  - reads (kiln_has, kiln_get, kiln_get_mut, kiln_changed_tick) answer the world's current
 *    state, without the queued changes; kiln_remove reports whether the component is there;
 *  - a queued add, set or remove whose entity died before the queue is applied is dropped
 *    (its value destroyed), as is a despawn of an entity already dead;
 *  - kiln_set does not check presence (an add queued earlier in the section may bring the
 *    component); a queued set whose component is absent when the queue lands is dropped;
 *  - a check hook runs when the call is made and again when the queue lands (the world may have moved on):
 *    a value refused then is dropped, as is a change refused for any reason but out of memory (KILN_ERR_LIMIT:
 *    a new archetype past the limit), a spawn whole when an add right after it is (see Placeholders), then
 *    the changes aimed at it. Each drop, here or by a system's buffer, is reported (kiln_world_dropped, its
 *    hook) once a command: a spawn_with of n components dropped counts 1 + n, as kiln_commands_count does.
 * A query's iteration defers the world too (kiln_query_iter): the plain API works in a loop. KILN_ERR_OUT_OF_MEMORY:
 * no section opened (past the first 32 threads with sections open at once, each takes memory for its count). */
kiln_result kiln_defer_begin(kiln_world *world);

/* Ends a section; the outermost end applies the queue (and what its hooks queue). KILN_ERR_OUT_OF_MEMORY when it could
 * not be fully applied, KILN_ERR_INVALID_ARGUMENT from a destroy or move hook: what was not applied (from the change
 * out of memory on) stays queued for the next outermost end, unless kiln_defer_clear drops it (values destroyed, spawns
 * let go; refused while deferred or in the end's hooks), as an undo must. An end on a thread with no begin of its own
 * open (another thread's section, a loop's) is refused, changing nothing, also in a non-exclusive running system. */
kiln_result kiln_defer_end(kiln_world *world);
void kiln_defer_clear(kiln_world *world);

/* True inside a deferred section (or an iteration). */
bool kiln_is_deferred(const kiln_world *world);

/* Queued changes the world dropped as they landed (a count and one message, however many): the count over
 * its life (to count), the last one's code (returned; KILN_OK: none) and message (to message; "" for none;
 * valid until the next drop): "kiln_schedule_run: system 'ai': command 2 (add Hp) on entity 7v1: entity is
 * not alive; dropped". A drop hook (fn; NULL: none) hears each as it happens, system naming whose buffer held
 * it (NULL: the world's queue), mid-apply as a destroy hook is; setting one hands back the one replaced. */
kiln_result kiln_world_dropped(const kiln_world *world, int64_t *count, const char **message);
typedef void (*kiln_drop_fn)(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx);
void kiln_world_drop_hook_set(kiln_world *world, kiln_drop_fn fn, void *ctx, kiln_drop_fn *old_fn, void **old_ctx);

/* ---- Job system ------------------------------------------------------------------------- */

/* A pool of worker threads. Jobs are submitted in batches tied to a counter and waited on;
 * a waiting thread runs queued jobs itself instead of blocking idle, so a job may submit
 * and wait on jobs of its own. Pools share nothing; several may exist. */
typedef struct kiln_jobs kiln_jobs;

typedef void (*kiln_job_fn)(void *arg);

typedef struct kiln_job {
    kiln_job_fn fn;
    void *arg;
} kiln_job;

/* Counts the unfinished jobs of a batch. Zero-initialise it; the pool updates it atomically. */
typedef struct kiln_counter { int32_t pending; } kiln_counter;

/* kiln_jobs_desc.workers: 0 (the default) starts available cores minus one threads;
 * KILN_JOBS_INLINE starts none, so every job runs on the thread that waits. */
#define KILN_JOBS_DEFAULT 0
#define KILN_JOBS_INLINE (-1)

typedef struct kiln_jobs_desc {
    int32_t workers;      /* threads to start (at most 256); KILN_JOBS_DEFAULT (0): available
                             cores minus one; KILN_JOBS_INLINE: none */
    kiln_alloc_fn alloc;  /* NULL: realloc/free; must be thread-safe */
    void *alloc_ud;
} kiln_jobs_desc;

/* Starts a pool. desc NULL or zero-filled means the defaults. Returns NULL when memory or threads
 * cannot be had, or for workers below KILN_JOBS_INLINE or above 256 (nothing is left running). */
kiln_jobs *kiln_jobs_create(const kiln_jobs_desc *desc);

/* Joins the workers after the queued jobs ran, then frees the pool (NULL: no-op); no thread may wait on it. */
void kiln_jobs_destroy(kiln_jobs *jobs);

/* Number of worker threads (0 for an inline pool). */
int32_t kiln_jobs_worker_count(const kiln_jobs *jobs);

/* Queues count jobs and adds count to counter. Fails (nothing queued) when out of memory, and with
 * KILN_ERR_INVALID_ARGUMENT for count < 0 or a NULL list. Steady-state submission allocates nothing. */
kiln_result kiln_jobs_submit(kiln_jobs *jobs, const kiln_job *list, int32_t count,
                             kiln_counter *counter);

/* Returns once counter reaches zero, running queued jobs meanwhile. */
void kiln_jobs_wait(kiln_jobs *jobs, kiln_counter *counter);

/* Called on a view of some rows of one chunk (see kiln_iter_range). */
typedef void (*kiln_chunk_fn)(kiln_iter *view, void *user);

/* Runs fn over every row the query matches, splitting large archetypes into row ranges of at least
 * min_rows (0: a default of 1024) spread over the pool's threads, and returns when all are done
 * (jobs NULL: inline). The world is deferred meanwhile, as in any iteration; fn may run on any
 * thread, so it must not call the world's structural API (record into a command buffer of its own
 * thread instead). Rows marked changed through the views update the columns' latest ticks. Fails
 * only when out of memory (before any row ran). A failing call in fn reads its message on its own
 * thread; the caller's thread then reads the first failing range's (row order), pool or not, run or not. */
kiln_result kiln_parallel_for(kiln_jobs *jobs, const kiln_query *query, int32_t min_rows,
                              kiln_chunk_fn fn, void *user);

/* ---- Schedule --------------------------------------------------------------------------- */

/* A schedule runs a frame as systems that declare what they read and write. Staging rule:
 * a system runs after every earlier-declared system it conflicts with (one writes what the
 * other reads or writes, or either is exclusive) and after every system it must follow
 * (before/after, directly or through a chain; they win over declaration order), otherwise as
 * early as possible. A before/after name no system has is ignored until one is added; a cycle
 * is refused by the add closing it. Within a stage, systems run as jobs on the pool, those
 * with main_thread on the calling thread in declaration order; exclusive ones run alone, the
 * world not deferred. Each system records structural changes into its own buffer, applied at
 * the end of its stage in declaration order, so the world does not depend on thread timing.
 * Debug builds abort when a system reads or writes a component it did not declare, or
 * changes the world from a worker thread, which release builds refuse (see "Declared access" in docs/c-api.md). */
typedef struct kiln_schedule kiln_schedule;

typedef struct kiln_system_ctx {
    kiln_world *world;
    double dt;                /* the frame's delta time, as given to kiln_schedule_run */
    kiln_commands *commands;  /* this system's own buffer, applied at the end of its stage */
    kiln_jobs *jobs;          /* the schedule's pool (NULL when inline), for kiln_parallel_for */
    void *user;               /* the desc's user pointer */
    const char *name;
} kiln_system_ctx;

typedef void (*kiln_system_fn)(const kiln_system_ctx *ctx);

#define KILN_SYSTEM_MAX_ACCESS 32
#define KILN_SYSTEM_MAX_ORDER 8
#define KILN_SCHEDULE_MAX_SYSTEMS 4096 /* systems in one schedule (its build grows as their cube) */

typedef struct kiln_system_desc {
    const char *name;       /* required, unique in the schedule, 1..63 bytes */
    kiln_system_fn run;     /* required */
    void *user;
    kiln_component reads[KILN_SYSTEM_MAX_ACCESS];  /* zero-terminated */
    kiln_component writes[KILN_SYSTEM_MAX_ACCESS]; /* zero-terminated; writing implies reading */
    bool exclusive;         /* makes structural changes directly: runs alone, undeferred */
    bool main_thread;       /* runs on the thread that calls kiln_schedule_run */
    bool disabled;          /* starts disabled (enable with kiln_schedule_enable) */
    const char *before[KILN_SYSTEM_MAX_ORDER]; /* names this system must precede; NULL-ended */
    const char *after[KILN_SYSTEM_MAX_ORDER];  /* names this system must follow; NULL-ended */
    kiln_fini_fn fini;      /* optional: called (world, user) once it is removed or destroyed */
} kiln_system_desc;

typedef struct kiln_schedule_desc { kiln_jobs *jobs; /* NULL: every system runs inline */ } kiln_schedule_desc;

/* Creates an empty schedule for world (desc NULL: defaults); NULL when out of memory. */
kiln_schedule *kiln_schedule_create(kiln_world *world, const kiln_schedule_desc *desc);
/* Runs each fini and frees the schedule; not in a run nor from a fini (any of its systems', here or from remove or
 * replace: asserts); NULL: no-op. A fini may use the schedule: it finds no system left; one it adds goes in turn. */
void kiln_schedule_destroy(kiln_schedule *schedule);

/* Adds a system at the end of declaration order (desc and strings copied). Fails, changing nothing, for a missing or
 * repeated name, no callback, an unknown component, out of memory, a full schedule (KILN_ERR_LIMIT) or a before/after
 * closing a cycle, also through names no system holds yet (x -> y: x runs before y): "kiln_schedule_add: 'a' -> 'b'
 * -> 'a' would form a cycle". In a run, only main_thread or exclusive systems may add; it runs from the next frame. */
kiln_result kiln_schedule_add(kiln_schedule *schedule, const kiln_system_desc *desc);

/* Removes the named system; others' before/after naming it wait for a new one. Between runs
 * it leaves at once (later ones move down an index, its fini runs). During a run, from any
 * system (itself too) on any thread, it is deferred to the end of kiln_schedule_run: find
 * stops finding it, it starts no more (a started stage finishes, its buffer applied) and keeps
 * its index with info.removing set. KILN_ERR_INVALID_ARGUMENT for an unknown name. */
kiln_result kiln_schedule_remove(kiln_schedule *schedule, const char *name);

/* Replaces the system named desc->name by desc in its place (the old fini runs, counts
 * restart); between runs only. Fails, changing nothing, for an unknown name, bad desc, cycle. */
kiln_result kiln_schedule_replace(kiln_schedule *schedule, const kiln_system_desc *desc);

/* Computes the stages (kiln_schedule_run builds when needed). Fails only when out of memory
 * (the previous stages stay) or during a run (KILN_ERR_INVALID_ARGUMENT). */
kiln_result kiln_schedule_build(kiln_schedule *schedule);

/* Runs one frame: advances the world tick (KILN_ERR_LIMIT, nothing run, at KILN_TICK_MAX), swaps the event
 * buffers, runs the stages and applies each stage's buffers, then systems removed meanwhile leave.
 * KILN_ERR_INVALID_ARGUMENT, nothing run, from its own systems, a non-exclusive system of another schedule
 * of the world (an exclusive one may run a frame of its own) or while a query of the world iterates; also
 * when a system returns with a deferred section or an iteration left open (named; ended). */
kiln_result kiln_schedule_run(kiln_schedule *schedule, double dt);

int32_t kiln_schedule_stage_count(kiln_schedule *schedule);  /* builds when needed; 0 on error */
int32_t kiln_schedule_system_count(const kiln_schedule *schedule);

typedef struct kiln_system_info {
    const char *name;       /* owned by the schedule, valid until the system leaves */
    int32_t index;          /* declaration order */
    int32_t stage;          /* -1 until built */
    bool enabled, exclusive, main_thread, removing; /* removing: leaves when the run ends */
    int64_t runs;
    int64_t last_ns;        /* duration of the last run */
    int64_t total_ns;       /* sum over all runs: average = total_ns / runs */
    const char *before[KILN_SYSTEM_MAX_ORDER], *after[KILN_SYSTEM_MAX_ORDER]; /* as given */
    int32_t before_count, after_count, unresolved; /* unresolved: names no system has now */
} kiln_system_info;

/* Describes the system at index (declaration order); false when out of range. */
bool kiln_schedule_system_info_get(const kiln_schedule *schedule, int32_t index,
                                   kiln_system_info *dest);

/* The index of the named system, or -1 (also for one being removed). */
int32_t kiln_schedule_find(const kiln_schedule *schedule, const char *name);

/* Enables or disables a system by name without rebuilding; a disabled system is skipped
 * (its stage stays). Fails for an unknown name. Like remove and find, fine from workers. */
kiln_result kiln_schedule_enable(kiln_schedule *schedule, const char *name, bool enabled);

/* Writes the stages as text ("stage 0: move, spin\nstage 1: collide\n") into buf (truncated
 * to size, always NUL-terminated) and returns the length the full text needs. */
size_t kiln_schedule_describe(kiln_schedule *schedule, char *buf, size_t size);

/* ---- Events ----------------------------------------------------------------------------- */

/* Events are typed messages between systems. Each type keeps two buffers: emit appends to the
 * current one; readers see the previous buffer, then the current one, in emit order;
 * kiln_events_update drops the previous buffer and makes the current one previous. So an event
 * emitted in frame N is readable through frame N+1 and gone in N+2. A schedule run performs the
 * update once, before its first stage. Event types are kiln_event_type handles (see Basic types). */

/* Registers an event type from the same desc as a component (name, size, alignment,
 * reflected fields, defaults; hooks are not allowed: events are plain data). Event names have their
 * own namespace. Same rules for re-registration as components. A main-thread system may register while worker
 * systems run and read events (they see a new type unknown or whole); from a worker: refused, as components. */
kiln_result kiln_event_register(kiln_world *world, const kiln_component_desc *desc,
                                kiln_event_type *dest);

/* The event type registered under name, or {0}. */
kiln_event_type kiln_event_lookup(const kiln_world *world, const char *name);

/* Describes an event type (fields, size); false for an unknown type. */
bool kiln_event_info_get(const kiln_world *world, kiln_event_type type, kiln_component_info *dest);

/* Copies value (NULL: zeroes) into the current buffer of type. While a schedule runs a main-thread system,
 * the emit goes into that system's command buffer instead and lands at the end of its stage, like its other
 * changes; worker-thread systems emit through kiln_commands_emit on their own buffer. value NULL emits the
 * type's defaults; value may be an event of the same type (from kiln_event_get), even one whose buffer this
 * emit grows. Fails with KILN_ERR_UNKNOWN_EVENT for an unknown type, or KILN_ERR_OUT_OF_MEMORY. */
kiln_result kiln_event_emit(kiln_world *world, kiln_event_type type, const void *value);

/* Number of readable events of type (previous buffer plus current); 0 for unknown types. */
int64_t kiln_event_count(const kiln_world *world, kiln_event_type type);

/* The i-th readable event of type (previous buffer first, each in emit order), or NULL when
 * out of range. Borrowed: valid until the next emit of that type or the next update. */
const void *kiln_event_get(const kiln_world *world, kiln_event_type type, int64_t i);

/* Drops the previous buffers of every type and makes the current ones previous, keeping the
 * memory (steady frames allocate nothing). From a running system that is not exclusive: refused, nothing changed. */
void kiln_events_update(kiln_world *world);

/* ---- Resources -------------------------------------------------------------------------- */

/* Resources: world-wide singletons keyed by a component type, with its layout, fields and hooks
 * ("Score"). Systems declare them in reads/writes by that id: ordered like component access. */

/* Sets the resource of type to a bitwise copy of value (NULL: the component's defaults),
 * destroying an existing value first (its hook runs; setting or removing this resource from it
 * fails). Fails for an unknown type, a value its check hook refuses (kiln_check_fn), out of memory
 * or from a destroy hook during world destroy; the caller then still owns value, no hook ran. A
 * main-thread system may set one while worker systems run and get others (a first set: unset or whole);
 * worker systems may set and remove those they write at once (on a worker: a thread-safe allocator). */
kiln_result kiln_resource_set(kiln_world *world, kiln_component type, const void *value);

/* The resource's value, or NULL when it is not set (or is a tag). Borrowed: valid until the
 * resource is removed (setting it again keeps the storage). Writes through it are allowed.
 * Debug builds poison a value removed during a run until the next run ends and abort, naming
 * it and the system, on a write through a stale pointer (see "Declared access"). */
void *kiln_resource_get(const kiln_world *world, kiln_component type);

/* True when the resource is set. */
bool kiln_resource_has(const kiln_world *world, kiln_component type);

/* Removes the resource, running its destroy hook; writes whether it was set to removed (may
 * be NULL). Fails for an unknown type, from the hook of the value a set replaces, or from the
 * destroy hooks kiln_snapshot_restore runs (it holds the resources it put in place). */
kiln_result kiln_resource_remove(kiln_world *world, kiln_component type, bool *removed);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
