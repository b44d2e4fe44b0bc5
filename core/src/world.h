/* world.h: the internal layout of a world: entity slots, component records, archetypes with
 * their columns, and live queries. Every other core file reads the world through this. */
#ifndef KILN_WORLD_H
#define KILN_WORLD_H

#include <pthread.h>
#include <stdatomic.h>

#include "hashmap.h"
#include "jobs.h"
#include "memory.h"

#define KL_NONE UINT32_MAX
#define KL_ERROR_SIZE 256
#define KL_SPAWN_CACHE 8
#define KL_PAGE_BITS 12
#define KL_PAGE_SIZE (1u << KL_PAGE_BITS)

/* One entity slot: one 64-bit word, the slot's generation in bits 43-63 above its place in
 * bits 0-42, so one read settles a handle and finds its row. Alive: the place is the
 * archetype (bits 27-42, below KL_ARCHETYPES_MAX) and the row (bits 0-26). Reserved (a
 * handle handed out by a deferred spawn, not alive yet): KL_PLACE_RESERVED, at the handle's
 * generation. Dead: KL_PLACE_DEAD or-ed with the next free slot (KL_NONE ends the free list),
 * at the generation the slot hands out next. Both states read as archetype ids at or above
 * KL_ARCHETYPES_MAX, beyond any archetype count. */
typedef struct kl_record {
    _Atomic(uint64_t) bits;
} kl_record;

#define KL_ROW_BITS 27
#define KL_ROWS_MAX (1u << KL_ROW_BITS)   /* rows per archetype: 134,217,728 */
#define KL_ARCHETYPES_MAX 0xFFC0u         /* archetypes per world: 65,472 */
#define KL_TYPES_MAX 256                  /* components per archetype, so per entity (a spawn lists as many) */
#define KL_PLACE_BITS 43
#define KL_PLACE_MASK ((UINT64_C(1) << KL_PLACE_BITS) - 1)
#define KL_PLACE_RESERVED ((uint64_t)KL_ARCHETYPES_MAX << KL_ROW_BITS)
#define KL_PLACE_DEAD (UINT64_C(0x7FF) << 32)

/* A record is read and written whole, relaxed: the thread that runs the world writes it (a
 * main-thread system's deferred spawn reserving a slot, say) while worker systems may read it
 * to check a handle (kiln_get, kiln_is_alive, a prepared getter). Nothing else is published
 * through a record meanwhile: a slot only becomes alive, or moves, while no other thread reads
 * the world (a schedule's stage has ended), so no acquire or release is needed. On x86 and
 * ARM these are plain loads and stores. */
static inline uint64_t kl_record_load(const kl_record *r) {
    return atomic_load_explicit(&((kl_record *)r)->bits, memory_order_relaxed);
}

static inline void kl_record_store(kl_record *r, uint64_t bits) {
    atomic_store_explicit(&r->bits, bits, memory_order_relaxed);
}

/* The archetype id and row in record bits (for a slot not alive, an id >= KL_ARCHETYPES_MAX). */
static inline uint32_t kl_bits_archetype(uint64_t bits) { return (uint32_t)(bits >> KL_ROW_BITS) & 0xFFFFu; }
static inline uint32_t kl_bits_row(uint64_t bits) { return (uint32_t)bits & (KL_ROWS_MAX - 1); }

static inline uint32_t kl_record_generation(const kl_record *r) {
    return (uint32_t)(kl_record_load(r) >> KL_PLACE_BITS);
}

/* The archetype id and row of a live slot (for others, an id >= KL_ARCHETYPES_MAX). */
static inline uint32_t kl_record_archetype(const kl_record *r) {
    return kl_bits_archetype(kl_record_load(r));
}

static inline bool kl_record_alive(const kl_record *r) {
    return kl_record_archetype(r) < KL_ARCHETYPES_MAX;
}

static inline uint32_t kl_record_row(const kl_record *r) { return kl_bits_row(kl_record_load(r)); }

/* The record of a live slot at generation, archetype and row. */
static inline uint64_t kl_record_bits(uint32_t generation, uint32_t archetype, uint32_t row) {
    return (uint64_t)generation << KL_PLACE_BITS | (uint64_t)archetype << KL_ROW_BITS | row;
}

/* Makes a slot alive at archetype and row, at generation. */
static inline void kl_record_set_alive(kl_record *r, uint32_t generation, uint32_t archetype,
                                       uint32_t row) {
    kl_record_store(r, kl_record_bits(generation, archetype, row));
}

/* Moves a live or reserved slot to archetype and row, keeping its generation. */
static inline void kl_record_set_place(kl_record *r, uint32_t archetype, uint32_t row) {
    kl_record_store(r, (kl_record_load(r) & ~KL_PLACE_MASK) | (uint64_t)archetype << KL_ROW_BITS | row);
}

static inline void kl_record_set_reserved(kl_record *r, uint32_t generation) {
    kl_record_store(r, (uint64_t)generation << KL_PLACE_BITS | KL_PLACE_RESERVED);
}

/* Marks a slot dead at generation, linking next (KL_NONE: none) on the free list. */
static inline void kl_record_set_dead(kl_record *r, uint32_t generation, uint32_t next) {
    kl_record_store(r, (uint64_t)generation << KL_PLACE_BITS | KL_PLACE_DEAD | next);
}

/* The next free slot after a dead one. */
static inline uint32_t kl_record_next(const kl_record *r) { return (uint32_t)kl_record_load(r); }

/* A check hook over many values at once (internal, set by the addon that registered the
 * component, see kl_component_set_check_rows): the values of count entities, stride bytes
 * apart, already stored. Returns the index of the first value check would refuse, count when
 * it refuses none, or -1 when it could not run (out of memory: check them one by one). */
typedef int64_t (*kl_check_rows_fn)(const kiln_world *world, const kiln_entity *entities,
                                    const uint8_t *values, size_t stride, int64_t count, void *ctx);

typedef struct kl_component {
    kiln_component id;
    uint32_t size;
    uint32_t align;
    uint32_t stride;
    kiln_destroy_fn destroy;
    kiln_move_fn move;
    kiln_check_fn check;
    kl_check_rows_fn check_rows; /* optional: check over many stored values (bulk loads) */
    void *hook_ctx;
    const void *defaults; /* size bytes inside this record's block, or NULL for zeroes */
    int32_t field_count;
    uint32_t entity_slots; /* entities in its KILN_TYPE_ENTITY fields (arrays counted whole):
                            * a buffer's apply rewrites placeholders in them; 0 costs nothing */
    uint8_t cmd_known;     /* what a command buffer records of it: 1, | 2 with entity fields */
    bool cmd_inline;       /* no hooks, no entity fields: a small value may sit in a command */
    bool owner;            /* an owner mark: copies leave it off (kiln_component_desc.owner) */
    uint8_t cmd_small;     /* its size when cmd_inline and of 1..KL_INLINE bytes (a value a
                            * command or a spawn holds: command_buffer.h), else UINT8_MAX */
    uint32_t name_hash;    /* kl_hash_name of the name under the world's seed (its index key) */
    kiln_field *fields;  /* field names point into names */
    char *names;         /* the component name, then each field name, NUL-separated */
    size_t block_size;   /* bytes of this record's single allocation */
} kl_component;

/* A registry of types described by kiln_component_desc: ids are dense from 1, records
 * never move once registered. Only the main thread registers, while worker systems may read:
 * a record is complete before its table is published (release) and count is published
 * (release) after both, so a reader that sees id <= count (acquire) sees the whole record. */
typedef struct kl_registry {
    _Atomic(kl_table *) items;  /* kl_component * entries, index id - 1 */
    _Atomic(int32_t) count;
    _Atomic(kl_table *) names;  /* open-addressed name index: _Atomic uint64_t slots of
                                 * name hash << 32 | id, at most half full, 0 empty */
} kl_registry;

/* One component's values in one archetype: a contiguous 16-byte-aligned array of
 * capacity * stride bytes, a parallel per-row tick array, and the column's latest tick. */
typedef struct kl_column {
    uint8_t *data;                /* data_cap rows, 16-byte aligned, shift bytes into their
                                   * block (NULL: no block; 56 bytes a column, not 64) */
    kiln_row_tick *ticks;         /* tick - world->tick_base; tick_cap rows */
    _Atomic(kiln_tick) latest;
    uint32_t stride;
    kiln_component id;            /* component->id, kept here for the move merge walk */
    int32_t data_cap, tick_cap;   /* each at least the archetype's capacity: they grow apart */
    bool plain;                   /* no hooks: rows move bytewise and nothing is destroyed */
    uint8_t shift;                /* data - its block's start (0 to 15) */
    /* the low 32 bits of the latest tick at which a row already in the column was written
     * (not a row appended): what the indexes' once-per-tick scan looks for (see
     * kl_column_written_since); 32 bits keep the column at 56 bytes */
    _Atomic(uint32_t) in_place;
    const kl_component *component;
} kl_column;

/* What an archetype knows of one component id: where its value lives (a column index >= 0,
 * KL_SLOT_TAG, or KL_SLOT_ABSENT) and the cached graph edge along it: the id + 1 of the
 * archetype with the component removed (when present) or added (when absent), 0 unknown. */
typedef struct kl_slot {
    int32_t column;
    uint32_t edge;
} kl_slot;

/* The move plan of a cached direct edge (kl_slot.edge, same id): the neighbour, the column
 * where the two archetypes differ, and what a move along it needs. Fixed once made: types,
 * hooks and columns of an archetype never change. */
typedef struct kl_edge {
    struct kl_archetype *to; /* NULL: no plan (the edge is not cached) */
    struct kl_column *column; /* add: to's column of the component; remove: this archetype's;
                               * NULL: a tag */
    uint32_t flags; /* KL_EDGE_* */
} kl_edge;

#define KL_EDGE_ADD 1u    /* the component is absent here and present in to */
#define KL_EDGE_REMOVE 2u /* the component is present here and absent from to */
/* Every value of both archetypes moves bytewise (no move or destroy hook), an add edge's
 * component has no check hook (a remove edge's may: removing runs no check), and a component
 * with a value has no padding (size == stride). */
#define KL_EDGE_PLAIN 4u
/* With KL_EDGE_PLAIN: every column both archetypes have is 8 bytes wide (moves along it need
 * no column's stride). */
#define KL_EDGE_EIGHT 8u

#define KL_SLOT_ABSENT (-1)
#define KL_SLOT_TAG (-2)
/* An archetype's direct slots cover one window of component ids, [slot_base, slot_base +
 * slot_count), sized by what it holds: at most KL_SLOTS_MIN ids, or KL_SLOTS_PER_TYPE per type
 * it holds, and never more than KL_SLOTS_MAX (a window over every id up to the highest one met
 * cost each archetype 32 KiB once ids passed 512). Ids outside it are found by binary search
 * and their edges in a hash map. */
#define KL_SLOTS_MIN 64u
#define KL_SLOTS_PER_TYPE 16u
#define KL_SLOTS_MAX 1024u

typedef struct kl_archetype {
    uint32_t id;
    uint32_t slot_count;    /* slots[0, slot_count) are valid, slot_count <= KL_SLOTS_MAX */
    kl_slot *slots;         /* indexed by component id - slot_base: the hot path of get, add,
                             * remove */
    kl_edge *edges_direct;  /* beside slots (NULL until an edge is cached): the move plans */
    kl_column *columns;
    kiln_entity *entities;
    int32_t count;
    int32_t capacity;       /* rows every array holds: the least of the arrays' own */
    uint32_t slot_base;     /* the first component id slots[0] stands for */
    int32_t entity_cap;     /* rows entities holds (arrays grow one by one: see reserve) */
    int32_t column_count;
    int32_t type_count;
    kiln_component *types;  /* sorted ascending; tags included */
    int32_t *column_of;     /* per type: column index, or -1 for a tag */
    kl_map edges;           /* ids outside the slots: component -> neighbour id + 1 (see kl_slot) */
    int32_t trim_below;     /* fewer rows than this: kiln_world_trim shrinks it (0: never) */
    /* (structure_tick and removed, both written at every removal, are kept apart: side by
     * side, GCC 12 wrote them as one vector store, 5 instructions instead of 3) */
    kiln_tick structure_tick; /* the last tick a row was added or removed, or columns moved */
    uint32_t hash;
    /* every row taken out since removed read low_from was at low_row or past it; an index
     * that read the rows sets low_row to -1 (readers may run at once on several threads), and
     * the next removal starts over from there (kl_rows_changed_from, kl_rows_read) */
    _Atomic(int32_t) low_row;
    uint64_t removed;         /* rows taken out so far (moves out included): while it stands
                               * still, rows were only appended, which an index over a query
                               * reads to take in only the new rows (kl_rows_mark) */
    uint64_t low_from;
    bool has_destroy;         /* some column has a destroy hook */
    bool has_hooks;           /* some column has a destroy or move hook (not all plain) */
    bool has_check;           /* some type has a check hook */
    bool eight;               /* no hooks, one column or more, every one 8 bytes wide: a
                               * swap-remove copies each row in one fixed move */
    bool grow_down;           /* the next growth takes the arrays last to first (reserve) */
    uint64_t row_bytes;       /* what one row takes: every value with its tick, the handle and
                               * its record (kiln_query_bytes); 64 bits, as two values of up
                               * to 2 GiB each pass 32 */
} kl_archetype;

/* How a slot kept per thread (error, guard, defer) knows its thread: by the address of the
 * thread's token (kl_thread_self: no two live threads share it, and it costs no call, unlike
 * pthread_self) and by the token, taken at the thread's first claim (0 until then). An exited
 * thread's address, like its pthread_t, goes to the next thread given its stack (glibc keeps
 * them), with a token of its own: a slot an exited thread left claimed is no later thread's. */
KL_HIDDEN extern _Thread_local uint64_t kl_thread_token;

static inline uintptr_t kl_thread_self(void) { return (uintptr_t)&kl_thread_token; }

/* Takes the calling thread's token, above that of every thread that ended before it began. */
KL_HIDDEN uint64_t kl_thread_token_take(void);

/* The calling thread's token, taken first if it has none: for a thread about to claim a slot. */
static inline uint64_t kl_thread_claim(void) {
    uint64_t token = kl_thread_token;
    return KL_UNLIKELY(token == 0) ? kl_thread_token_take() : token;
}

/* The calling thread as a slot stores it: read once, out of a loop over slots (each read of a
 * thread-local is a __tls_get_addr call in libkiln.so). */
typedef struct kl_thread_id {
    uintptr_t self;
    uint64_t token;
} kl_thread_id;

static inline kl_thread_id kl_thread_me(void) { return (kl_thread_id){kl_thread_self(), kl_thread_token}; }

/* True when a slot holding thread and token is me's. */
static inline bool kl_thread_owns(kl_thread_id me, uintptr_t thread, uint64_t token) {
    return thread == me.self && token == me.token;
}

/* One thread's error message while a schedule runs on the world (or a kiln_parallel_for
 * outside one). */
typedef struct kl_error_slot {
    _Atomic(uintptr_t) thread; /* the thread that claimed it, 0 when free */
    _Atomic(uint64_t) token;   /* its token: a later thread given the same address has another */
    char text[KL_ERROR_SIZE];  /* read and written only by that thread */
} kl_error_slot;

/* The error buffers of a schedule's threads, published in the world while it runs: the
 * running thread keeps world->error, any other thread claims a slot at its first failure and
 * reads its own message from it until the run ends (a thread beyond count keeps none). A
 * kiln_parallel_for outside a run publishes its own with no owner (parallel.c). */
#define KL_ERROR_SPARE_SLOTS 4 /* slots beyond a pool's threads, for other threads helping it */

typedef struct kl_error_slots {
    uintptr_t owner; /* the thread whose messages go to world->error (0: none); running the
                      * schedule until the slots go, so alive while any thread reads it here */
    int32_t count;
    kl_error_slot *slots;
} kl_error_slots;

/* One thread's kiln_defer_begin sections still open on a world: an end is that thread's to make
 * (defer.c). Threads beyond KL_DEFER_SLOTS of them take an entry in a table under a lock. */
#define KL_DEFER_SLOTS 32

typedef struct kl_defer_slot {
    _Atomic(uintptr_t) thread; /* the thread that claimed it, 0 when free */
    _Atomic(uint64_t) token;   /* its token: a later thread given the same address has another */
    int32_t depth;             /* read and written only by that thread */
} kl_defer_slot;

/* A teardown hook registered with kiln_world_atfini. */
typedef struct kl_fini {
    kiln_fini_fn fn;
    void *ctx;
} kl_fini;

struct kiln_world {
    kl_allocator alloc;
    kiln_tick tick;
    uint64_t tick_epoch;   /* times the tick was taken back (kiln_tick_epoch) */
    kiln_tick tick_base;   /* rows store tick - tick_base; tick - tick_base stays below
                            * KILN_TICK_REBASE_AT (see kl_ticks_rebase); iterators point here */
    uint64_t structure_version; /* bumped by rows added or removed, columns moved (getters) */
    int64_t trim_mark;     /* allocated bytes after the last kiln_world_trim (kl_world_trim_due) */
    atomic_int iterating;  /* active query iterations; structural changes assert on it */
    /* Bumped when a schedule run ends every iteration its systems left open: an iterator that
     * started in an earlier era was ended, and a later next or fini on it does nothing. An
     * iterator keeps its low 48 bits (iteration_era in query.c says why that is enough). */
    _Atomic(uint64_t) iter_era;
    atomic_int defer_depth;  /* nesting of defer_begin; > 0 queues structural calls */
    kl_defer_slot defer_slots[KL_DEFER_SLOTS]; /* whose kiln_defer_begin sections are open */
    atomic_int defer_slots_used; /* slots below it were ever claimed: a thread's own is there */
    /* Entries of the threads that found no free slot (grown, read and written under defer_lock;
     * an entry's depth changes only on its thread) and how many are held (read without it). */
    kl_defer_slot *defer_more;
    int64_t defer_more_cap;
    atomic_int defer_more_used;
    atomic_flag defer_lock;
    int32_t in_hook;         /* > 0 while a change runs destroy or move hooks (kl_in_hook) */
    /* Set (to the caller, "kiln_load") while in_hook holds for check hooks a caller runs over
     * values it is checking rather than for a change's destroy or move hooks: messages name it. */
    const char *in_check_of;
    kiln_commands *deferred; /* the queue of a deferred world */
    kiln_commands *defer_target; /* when set (a main-thread system runs), queue here instead */
    _Atomic(uint64_t) placeholder_tags; /* batch tags handed out so far (see commands.c) */
    kiln_commands *buffers;      /* the user's buffers, linked, detached when the world dies */

    /* Entity records live in fixed pages that never move, found through a page table that is
     * replaced (never resized in place) when it fills; replaced tables stay valid until the
     * world is destroyed, so a worker thread reading records while the main thread reserves
     * a slot never reads freed memory. */
    kl_record **_Atomic pages;
    uint32_t page_count;
    uint32_t page_cap;
    struct kl_page_table *tables; /* every page table, newest first */
    _Atomic(uint32_t) slot_count; /* slots handed out so far */
    uint32_t free_head;    /* first dead reusable slot, or KL_NONE */
    int64_t alive;

    kl_registry components;    /* component types */
    kl_registry event_types;   /* event types: the same descriptions, their own names */

    kl_archetype **archetypes; /* index id; 0 is the empty archetype */
    int64_t archetype_cap;
    int32_t archetype_count;
    kl_map archetype_index;    /* type-set hash -> id + 1 */

    kiln_query **queries;
    int64_t query_cap;
    int32_t query_count;

    /* The last component list kiln_spawn_with saw, so repeated spawns of one shape skip
     * sorting and the archetype look-up. */
    kiln_component spawn_key[KL_SPAWN_CACHE];
    int32_t spawn_column[KL_SPAWN_CACHE]; /* per listed component: column, or -1 for a tag */
    int32_t spawn_key_count;              /* -1: empty cache */
    uint64_t hash_seed;    /* kl_hash_seed's, for tables keyed by names others choose */
    bool spawn_plain;  /* every listed column plain (no hooks) and as wide as its values */
    kl_archetype *spawn_arch;
    /* The listed components with a column, in list order: the column and the position in the
     * list (so a cached spawn walks only the values it writes), ended by a NULL column. */
    struct kl_spawn_column {
        kl_column *column;
        size_t input;
    } spawn_data[KL_SPAWN_CACHE + 1];
    kiln_tick spawn_touched; /* those columns' latest ticks are at least this (0: unknown) */

    /* Event queues and resources are tables (see memory.h): a main-thread system may
     * register an event type or set a new resource while worker systems read others. */
    _Atomic(kl_table *) events;    /* kl_event_queue per event type (index id - 1) */
    _Atomic(kl_table *) resources; /* kl_resource per component id (index id - 1), on demand */
    /* Held while a resource is added or removed (the table grows, an entry changes): worker
     * systems may set and remove the resources they write at the same moment. */
    atomic_flag resource_lock;
    /* Set while the world destroys its resources: a destroy hook setting one then is refused
     * (it would outlive the table being emptied). */
    bool resources_closed;
    /* Set (to its name) while a call runs destroy hooks across which it holds resources it put
     * in place (kiln_snapshot_restore): a kiln_resource_remove from those hooks fails. */
    const char *resources_held;
    /* Debug builds (KILN_ACCESS_CHECKS): values of resources removed while a schedule runs,
     * kept poisoned for a while so a write through a stale pointer is caught (resource.c). */
    _Atomic(struct kl_resource_grave *) graves;
    /* 1 while a schedule runs a stage of systems that are not exclusive (they may share the
     * world with workers): the frame's own steps (a schedule run, the event update) wait. */
    atomic_int in_stage;
    /* The thread running that stage (written before in_stage is set): on any other, a deferred
     * call is refused (kl_off_stage_thread), as it would queue beside that thread. */
    pthread_t stage_thread;
    /* On that thread: whether a main_thread system runs there now (the only caller let through),
     * and the jobs of the schedule's pool it runs meanwhile (taken up waiting: refused too). */
    bool stage_main;
    kl_jobs_watcher stage_watch;
    /* Live schedules of the world, and runs of them in progress (nested runs count each), and
     * whether kiln_world_destroy has begun: a destroy that would free what these use asserts. */
    int32_t schedules, schedule_runs;
    bool destroying;
    bool finis_run; /* the destroy ran the teardown hooks: none may be registered now */

    /* The thread slots of the schedule running now, for the debug checks of guard.c. */
    _Atomic(struct kl_guard_slot *) guard;

    /* The error buffers of the threads the running schedule runs systems on (NULL: every
     * message goes to error; see kl_error_slots). */
    _Atomic(kl_error_slots *) error_slots;

    /* Queued changes a lenient apply dropped as they landed (commands_apply.c: drop_command):
     * how many, the last one's code and message (a count and one message, however many), and
     * the hook told of each (kiln_world_drop_hook_set). Written on the owner thread only. */
    int64_t dropped;
    kiln_result dropped_code;
    kiln_drop_fn drop_fn;
    void *drop_ctx;
    char dropped_error[2 * KL_ERROR_SIZE]; /* the command named, then the reason */

    /* Teardown hooks (kl_fini entries), in registration order. A main-thread system may register
     * one while worker systems look addon state up (kiln_world_atfini_get): as the registry, an
     * entry is whole before its table is published (release) and the count after both. */
    _Atomic(kl_table *) finis;
    _Atomic(int32_t) fini_count;

    char error[KL_ERROR_SIZE];
};

/* The calling thread's error buffer: world->error when no slots are published or on their
 * owner thread, else the thread's slot, claimed first when claim is set; NULL for a thread with
 * none. Only failures and readers of the message come here. */
KL_HIDDEN char *kl_error_text(const kiln_world *world, bool claim);

/* The calling thread's message, set aside while it runs code whose failures are not its own
 * (a range of a kiln_parallel_for, another system's job taken while it waits): set_aside keeps
 * the text and empties the buffer, so a message in text after the code ran is that code's, and
 * put_back restores the kept text. text is NULL for a thread with no buffer (beyond the slots). */
typedef struct kl_error_kept {
    char *text;
    size_t len;
    char kept[KL_ERROR_SIZE];
} kl_error_kept;
KL_HIDDEN void kl_error_set_aside(const kiln_world *world, kl_error_kept *dest);
KL_HIDDEN void kl_error_put_back(const kl_error_kept *kept);

/* Records a failure: formats the message into the calling thread's error buffer (world->error,
 * or its slot while a schedule runs it on a worker: see kl_error_slots) and returns code. */
KL_HIDDEN kiln_result kl_fail(kiln_world *world, kiln_result code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Refuses a list call given a NULL dest with a capacity above 0: the world error names call. */
KL_HIDDEN void kl_refuse_dest(const kiln_world *world, const char *call, int64_t capacity);

/* Number of types registered in reg; safe on any thread. */
static inline int32_t kl_registry_count(const kl_registry *reg) {
    return atomic_load_explicit(&((kl_registry *)reg)->count, memory_order_acquire);
}

/* The record for id, or NULL when id is not registered in reg; safe on any thread. */
static inline const kl_component *kl_registry_get(const kl_registry *reg, uint32_t id) {
    if (id == 0 || id > (uint32_t)kl_registry_count(reg)) return NULL;
    kl_table *t = atomic_load_explicit(&((kl_registry *)reg)->items, memory_order_acquire);
    return ((kl_component *const *)kl_table_entries(t))[id - 1];
}

static inline const kl_component *kl_component_get(const kiln_world *world, kiln_component id) {
    return kl_registry_get(&world->components, id);
}

/* The record of slot index (which must be below slot_count). */
static inline kl_record *kl_record_at(const kiln_world *world, uint32_t index) {
    kl_record **pages = atomic_load_explicit(&((kiln_world *)world)->pages, memory_order_acquire);
    kl_record *r = &pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)];
    /* A slot below slot_count has a page. Said for the compiler, which cannot tell it from a
     * relaxed atomic read the way it does from a plain one: callers' NULL tests of a record
     * found (kl_record_of) then fold away. */
    if (r == NULL) __builtin_unreachable();
    return r;
}

static inline uint32_t kl_slot_count(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->slot_count, memory_order_acquire);
}

/* Points the record of e, a live entity held in a row, at place (an archetype id << KL_ROW_BITS
 * | a row): one store that reads nothing (a live slot's generation is its handle's), for the
 * entity a swap-remove moves into a hole, whose record is elsewhere in memory. */
static inline void kl_record_put(const kiln_world *world, kiln_entity e, uint64_t place) {
    kl_record_store(kl_record_at(world, kiln_entity_index(e)),
                    (uint64_t)kiln_entity_generation(e) << KL_PLACE_BITS | place);
}

/* The record of a live entity, or NULL for null, stale and out-of-range handles; *bits gets
 * the record as checked, for a caller that finds the row from the same single read. */
static inline kl_record *kl_record_live(const kiln_world *world, kiln_entity e, uint64_t *bits) {
    uint32_t index = kiln_entity_index(e);
    if (index >= kl_slot_count(world)) return NULL;
    kl_record *r = kl_record_at(world, index);
    *bits = kl_record_load(r);
    /* The generation and liveness in one compare: the place is the archetype when the handle's
     * whole high half is the slot's generation (any other bit, stray high ones included, puts
     * it at 2^16 or more), and dead or reserved slots read as archetypes at or beyond
     * KL_ARCHETYPES_MAX. */
    uint64_t place = (*bits >> KL_ROW_BITS) ^ ((e >> 32) << (KL_PLACE_BITS - KL_ROW_BITS));
    if (place >= KL_ARCHETYPES_MAX) return NULL;
    return r;
}

static inline kl_record *kl_record_of(const kiln_world *world, kiln_entity e) {
    uint64_t bits;
    return kl_record_live(world, e, &bits);
}

/* The current tick as a row stores it: its distance from the tick base. */
static inline kiln_row_tick kl_row_tick_now(const kiln_world *world) {
    return (kiln_row_tick)(world->tick - world->tick_base);
}

/* Moves the tick base to KILN_TICK_WINDOW ticks behind the current tick (when that is
 * forward), shifting every row's tick down and clamping at the base those now older. No
 * worker may be running; open iterations read the new base through the world. */
KL_HIDDEN void kl_ticks_rebase(kiln_world *world);

/* Moves the world tick forward to tick (nothing when it is not later), rebasing as
 * kiln_tick_advance would, so the rows' ticks stay within the span. Same rules as above. */
KL_HIDDEN void kl_tick_forward(kiln_world *world, kiln_tick tick);

/* kiln_world_trim when the world's allocated bytes grew by half again (and 16 MiB) since the
 * last trim; kiln_schedule_run calls it once its frame has landed. */
KL_HIDDEN void kl_world_trim_due(kiln_world *world);

/* The record of an entity handed out by a deferred spawn and not yet alive, or NULL. */
static inline kl_record *kl_record_reserved(const kiln_world *world, kiln_entity e) {
    uint32_t index = kiln_entity_index(e);
    if (index >= kl_slot_count(world)) return NULL;
    kl_record *r = kl_record_at(world, index);
    uint64_t bits = kl_record_load(r);
    if ((bits >> KL_PLACE_BITS) != (e >> 32) || (bits & KL_PLACE_MASK) != KL_PLACE_RESERVED)
        return NULL;
    return r;
}

#endif
