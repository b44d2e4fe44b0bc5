/* klua.h: every internal name the files of the Lua binding share, grouped by the file that
 * defines it. Files depend downwards only: support <- values, schema, access <- class files. */
#ifndef KLUA_H
#define KLUA_H

#include <lauxlib.h>
#include <math.h>
#include <lua.h>
#include <string.h>

#include "compat.h" /* the 5.4 API over LuaJIT, when built against it */

#include "kiln.h"
#include "kiln_lua.h"

/* Checks of a float's range, a NaN cost or a value written back as read need NaNs and infinities. */
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "kiln's Lua binding needs IEEE NaN and infinities: build it without -ffast-math and -ffinite-math-only"
#elif defined(__GNUC__)
#define KLUA_HIDDEN __attribute__((visibility("hidden")))
#define KLUA_NORETURN __attribute__((noreturn))
#else
#define KLUA_HIDDEN
#define KLUA_NORETURN
#endif

/* ---- The binding's stack rules ---------------------------------------------------------
 * 1. A method's argument 1 is its object. World methods hold the World metatable as upvalue
 *    KLUA_UPV_META and check argument 1 against it (klua_self), with no registry look-up.
 * 2. Every argument is checked and every value converted before the world is touched, so a
 *    raised error leaves nothing half-done. Conversions read tables raw (no metamethod runs
 *    mid-call) and write into the world's scratch, which no Lua code can reach.
 * 3. klua_self pads the arguments to KLUA_ARG_PAD slots (absent ones read as nil) and then
 *    pushes a to-be-closed guard that holds the collector: a method must read its arguments
 *    by absolute index and must not lua_settop below the guard (it returns instead).
 *    A call is made as the guard is pushed, so the frame of the call that ends the hold
 *    exists before the world is touched (a memory error cannot follow a change).
 *    Hot methods use klua_self_unheld (the padding, no hold), so what they allocate is
 *    collected as any other garbage, and keep rule 3a instead.
 * 3a. Only a Lua call that creates an object (a table, string, userdata or closure) can run
 *    the collector, and with it a finalizer that may call back into the world. An unheld
 *    method holds no pointer into the world or its scratch across such a call: it creates
 *    its objects first, or copies the bytes it reads into its own memory before it converts
 *    them (raising is exempt: nothing is used after it). Where that is not possible it calls
 *    klua_hold_gc on that path only. (An emergency collection, on a failed allocation,
 *    runs no finalizers.)
 * 4. Objects keep their Lua-side state in numbered user values (the *_UV enums below), never
 *    in raw numbers; registry entries are named by KLUA_REG_* keys.
 * 5. Errors (formats are lua_pushfstring's: %s %d %I %f %p %c %U %%): misuse of an argument raises "bad argument #N to 'world:get' (detail)" (N
 *    counts from the first argument after self, as Lua does for methods); a runtime failure
 *    raises "world:get: detail" (core messages lose their "kiln_xxx: " prefix, so each call
 *    is named once). Text quoted from the user is bounded by KLUA_QUOTE_MAX.
 * 6. The core calls Lua only through lua_pcall (systems, hooks); nothing here calls Lua from
 *    a worker thread. */

#define KLUA_WORLD "kiln.World"
#define KLUA_QUERY "kiln.Query"
#define KLUA_COMMANDS "kiln.Commands"
#define KLUA_GUARD "kiln.IterGuard"
#define KLUA_FRAME_END "(frame end)" /* the system a failure to land a frame's changes names */
#define KLUA_GC_GUARD "kiln.GcGuard" /* a World's collector hold (klua_new_gc_guard) */

#define KLUA_NAME_CACHE 32     /* component names klua_check_component remembers by address */
/* Strings up to this length are interned (LUAI_MAXSHORTLEN of Lua 5.2-5.4; LuaJIT interns
 * all), so one content has one address while it lives. */
#define KLUA_SHORT_STRING 40
#define KLUA_ARG_PAD 6         /* klua_self pads the arguments to this many */
#define KLUA_QUOTE_MAX 64      /* bytes of user text quoted in a message */
#define KLUA_UPV_META 1        /* a World method's upvalue: the World metatable */
#define KLUA_REG_WORLDS "kiln.worlds" /* registry: weak map klua_world* -> its userdata */
#define KLUA_REG_STEPS "kiln.steps"   /* registry: generated step source -> its compiled chunk */
#define KLUA_REG_TAGS "kiln.tags"     /* registry: the last placeholder tag the state handed out (commands.c) */
#define KLUA_REG_MOD_TAGS "kiln.mod_tags" /* host's registry: the last its mod states handed out */
#define KLUA_REG_VALUES "kiln.values" /* registry: the metatable of weak boxes {values table} */
/* registry: C methods a Lua function replaced in their class's method table -> their name */
#define KLUA_REG_REPLACED "kiln.replaced"
#define KLUA_REG_CLASSES "kiln.classes" /* registry: a class tag's 8 name bytes -> class name */
/* registry: weak map kiln.Prefab (its public table) -> its parts {world, native | def, refs, held} */
#define KLUA_REG_PREFABS "kiln.prefabs"

/* User values of a kiln.World. */
enum klua_world_uv { KLUA_WORLD_UV_STATE = 1, KLUA_WORLD_UV_COUNT = KLUA_WORLD_UV_STATE };
/* Keys of the World state table. */
#define KLUA_STATE_RESOURCES "resources" /* Lua-valued resources by name */
#define KLUA_STATE_SYSTEMS "systems"     /* Lua systems by name (anchors them) */
#define KLUA_STATE_RUNS "runs"           /* a Lua system's address -> {function, query} */
#define KLUA_STATE_FAILURES "failures"   /* failures since the last report, or nil */
#define KLUA_STATE_LOOPS "loops"         /* open iterations: Query -> the thread that began it */
#define KLUA_STATE_VALUES "values"       /* Lua-valued components' values, by ref (values.c) */

/* User values of a kiln.Query. */
enum klua_query_uv {
    KLUA_QUERY_UV_WORLD = 1, /* the World (keeps it alive) */
    KLUA_QUERY_UV_DATA,      /* per term: the view's data table */
    KLUA_QUERY_UV_PROXIES,   /* per term: a read-only proxy over the data table */
    KLUA_QUERY_UV_GUARD,     /* the to-be-closed guard q:each hands out */
    KLUA_QUERY_UV_BULK,      /* the bulk path's reusable arrays and snapshot block */
    KLUA_QUERY_UV_EACH,      /* the generic-for step: the C one, or the generated Lua one (iteration.c) */
    KLUA_QUERY_UV_KEYS,      /* interned field names, KLUA_FIELD_KEY(t, f) */
    KLUA_QUERY_UV_INERT,     /* an empty table: the Lua step's views between loops */
    KLUA_QUERY_UV_FFI,       /* LuaJIT: ffi.lua's state of the query while its FFI loop runs (jit_views.c), or nil */
    KLUA_QUERY_UV_FFI_STATE, /* LuaJIT: ffi.lua's state of the query's FFI loops, or nil */
    KLUA_QUERY_UV_COUNT = KLUA_QUERY_UV_FFI_STATE
};
#define KLUA_FIELD_KEY(t, f) ((lua_Integer)(t) * KILN_MAX_FIELDS + (f) + 1)
/* User values of the iteration guard. */
enum klua_guard_uv { KLUA_GUARD_UV_QUERY = 1, KLUA_GUARD_UV_COUNT = KLUA_GUARD_UV_QUERY };
/* User values of a kiln.Commands. */
enum klua_commands_uv {
    KLUA_COMMANDS_UV_RECORDS = 1, /* flat array of pending records */
    KLUA_COMMANDS_UV_RESOLVED,    /* entities by placeholder number */
    KLUA_COMMANDS_UV_WORLD,       /* the World the batch's spawns landed in (nil: none yet) */
    KLUA_COMMANDS_UV_COUNT = KLUA_COMMANDS_UV_WORLD
};

typedef struct klua_system klua_system;
typedef struct klua_world klua_world;

/* The tag on a mod's entities is the owner mark "kiln.mod.NAME" (mods.c registers it; no
 * script may declare such a name: klua_is_mod_tag_name; whether a component is one: klua_is_mod_tag). */
#define KLUA_MOD_TAG_PREFIX "kiln.mod."
#define KLUA_MOD_TAG_PREFIX_LEN (sizeof KLUA_MOD_TAG_PREFIX - 1)
static inline bool klua_is_mod_tag_name(const char *name) {
    return strncmp(name, KLUA_MOD_TAG_PREFIX, KLUA_MOD_TAG_PREFIX_LEN) == 0;
}
/* Whether info is such a tag: only the manager puts one on an entity or takes it off (world:spawn,
 * world:add and world:remove refuse it, the host's too, and so command buffers, which land through
 * them: added, its entity would be the mod's, and go with its unload; removed, the mod's entity
 * would be the host's, outside the mod's books). The owner flag first: one byte on every add. */
static inline bool klua_is_mod_tag(const kiln_component_info *info) {
    return info->owner && klua_is_mod_tag_name(info->name);
}
#define KLUA_MOD_TAG_REFUSED "'%s' is a mod's tag, which only its mod manager puts on the mod's entities"

/* What a mod's view of the world asks of the mod manager (mods.c), which lives above the
 * class files: the calls go through these pointers, never by name. */
typedef struct klua_mod_hooks {
    /* Before the view spawns an entity whose values take bytes: raises when the mod may spawn
     * no more, or hold no more; returns the tag every entity the mod spawns carries (comps:
     * the count components it spawns with, any order).
     * after_spawn records the new entity. */
    kiln_component (*before_spawn)(lua_State *L, klua_world *kw, int64_t bytes, const kiln_component *comps,
                                   int32_t count);
    void (*after_spawn)(lua_State *L, klua_world *kw, kiln_entity e);
    /* Before the view declares component or event type name (existed: the world has it
     * already): raises when the mod may declare no more, or mods may register no new one. */
    void (*before_declare)(lua_State *L, klua_world *kw, const char *name, bool event, bool existed);
    /* A component or event type the view declared (existed: it was there already). */
    void (*declared)(lua_State *L, klua_world *kw, uint32_t id, bool event, bool existed);
    /* Who declared component (or event type) id first: "the host" or "mod 'name'" (into
     * buf); id 0 names the view's own mod. */
    const char *(*owner)(klua_world *kw, uint32_t id, bool event, char *buf, size_t size);
    /* world:system of the view: adds the system, or stages it while the mod loads; raises
     * (naming the owner) for a name another mod or the host uses. */
    void (*add_system)(lua_State *L, klua_world *kw, const kiln_system_desc *d);
    /* A system of the mod failed (message without traceback); disabled: it was stopped;
     * out_of_memory: it failed for memory (not for a failed allocation it recovered from). */
    void (*failed)(klua_world *kw, const char *system, const char *message, bool disabled, bool out_of_memory);
    /* How many more entities the mod may spawn now (its limit less its live and queued ones). */
    int64_t (*spawn_room)(klua_world *kw);
    /* Before the view adds component c (bytes a value) to e, which lacks it, sets resource c
     * which the world lacks (e KILN_NULL_ENTITY), or emits an event of bytes (both null):
     * raises when the mod would hold more bytes in the world than it may. */
    void (*before_grow)(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, int64_t bytes, const char *fname);
    /* A query the view just made, not yet counted or linked: raises, after destroying it,
     * when the mod may hold no more queries or no more bytes in the world. */
    void (*query_made)(lua_State *L, klua_world *kw, kiln_query *q, const char *fname);
    /* Before the view adds tag c to e, which lacks it (add), or removes component c from e,
     * which has it (either may make an archetype; spawns and other adds ask before_spawn and
     * before_grow; e KILN_NULL_ENTITY: a change whose archetype is not known, set_parent):
     * raises when mods may make no more. */
    void (*before_reshape)(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, bool add, const char *fname);
    /* Between two instructions of the mod's code, from the budget's count hook (every 1000 instructions; not
     * from the row mode's call hook, which only Lua 5.4 uses): may collect. NULL when there is nothing to do. */
    void (*step)(lua_State *L, klua_world *kw);
    /* While a mod's top level runs (what a failed load takes back, mod_undo.c): before_remove
     * raises before the view despawns e (c KILN_NO_COMPONENT) or removes c from it, unless e
     * is the view's mod's own or c a component this load registered (and at any time, before
     * a despawn of an e holding what is read-only to mods); before_despawn_tree asks
     * before_remove of root and every entity under it (world:despawn_recursive);
     * before_add records e, which lacks c, to take c off again should the load fail (raises
     * out of memory); emits gives the buffer a top level's emits wait in until it succeeds
     * (NULL: emit at once). before_resource, before the view sets resource c which the world
     * lacks (set) or removes it, which the world has: records the set to take back, or raises
     * for a removal a failed load could not take back. before_change, before the view writes value
     * (NULL: one that differs) over c on e, which has it: raises when c is Name or Parent, which
     * the world indexes, and e was there before the top level (a failed load could not give the
     * old name or link back: another may hold the name by then). */
    void (*before_remove)(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const char *fname);
    void (*before_despawn_tree)(lua_State *L, klua_world *kw, kiln_entity root, const char *fname);
    void (*before_add)(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c);
    void (*before_resource)(lua_State *L, klua_world *kw, kiln_component c, bool set, const char *fname);
    void (*before_change)(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const void *value,
                          const char *fname);
    kiln_commands *(*emits)(lua_State *L, klua_world *kw);
    /* The mod's queued changes the world dropped as they landed, and the last one's message. */
    int64_t (*dropped)(klua_world *kw, const char **message);
    /* A removal before_remove did not ask about, and a call's queuing done: mods.h's klua_mod_queue_plain_remove */
    void (*before_queue_remove)(lua_State *L, klua_world *kw, const char *fname);
    void (*queued)(klua_world *kw);
} klua_mod_hooks;

/* Shared with Lua-valued components' destroy hooks; a world resource: it lives as long as the world, past Lua. */
typedef struct klua_shared {
    lua_State *L;   /* NULL once Lua let go of the world */
    int values_ref; /* registry ref of a weak box whose [1] is the World's values table */
    int ref_high;   /* the highest value ref handed out on this world (klua_values_new) */
    klua_world *host_kw; /* the host's World holding it, which its teardown hook releases (world.c) */
} klua_shared;

struct klua_world {
    kiln_world *world;
    bool owned;                /* Lua destroys the world on close/collect */
    bool closed, release_owed; /* owed: its world's teardown hook closed it, its release to finish */
    klua_shared *shared;
    kiln_component shared_type;
    kiln_jobs *jobs;
    int32_t workers;
    kiln_schedule *schedule;
    klua_system *current;      /* the Lua system running now, for access checks */
    klua_system *systems;      /* the Lua systems made through this World, not yet freed */
    uint8_t *lua_valued;       /* per component id: 1 when it holds Lua values, | 2 when the
                                * host's World declared it after a mod registered it, | 4 when
                                * a mod registered it */
    int32_t lua_valued_cap;
    int32_t max_failures;      /* disable a system after this many consecutive failures */
    int64_t frame_failures;    /* failed system runs since world:progress began (systems.c) */
    int64_t lost_failures;     /* failures of runs whose record found no memory (systems.c) */
    char lost_system[KILN_MAX_NAME + 1]; /* the first such run's system */
    char landing_failure[256]; /* a frame's end that could not land its changes, not yet
                                * reported (systems.c): the core's message, or "" */
    int64_t instructions;      /* budget of one Lua system run (0: none) */
    int64_t budget_used;       /* of the entry armed now (budget.c) */
    int64_t budget_limit;      /* of the entry armed now; 0: none armed */
    int64_t budget_ran;        /* of the entry armed now: budget_used when a clock spent it,
                                * else -1 (budget.c) */
    char budget_what[KILN_MAX_NAME + 24]; /* "system 'name'", for the message */
    int64_t frame_limit;       /* a mod's view: instructions all its system runs of one frame
                                * may take together (0: no such limit) */
    int64_t frame_used;        /* of the frame at frame_tick (a klua_frame_key) */
    kiln_tick frame_tick;
    bool frame_capped;         /* the entry armed now got what was left of the frame's */
    int32_t frame_time_ms;     /* a mod's view: wall clock all its system runs of one frame may
                                * take together (0: no such limit) */
    double frame_time_used;    /* seconds, of the frame at frame_tick */
    uint8_t deadline_from;     /* of the entry armed now: a klua_deadline_from, for its message */
    int64_t row_cost;          /* while each-rows of a bounded callback run: charged per row
                                * (klua_budget_rows_begin), else 0 */
    uint32_t rows_charged;     /* rows charged since the clock was last read */
    bool row_expected;         /* a mod's rows: the next call is the callback's own */
    int32_t time_limit_ms;     /* wall-clock backstop of one entry (0: none) */
    double deadline;           /* monotonic seconds, while an entry with a time limit runs */
    int progress_idx;          /* stack index of the world while world:progress runs */
    lua_State *run_L;          /* the thread running world:progress (systems run on it) */
    int values_box_ref;        /* registry ref of this World's values box (values.c) */
    int names_ref;             /* registry ref: component name (interned) -> id; its array
                                * part holds the field keys of the schema cache (schema.c) */
    struct klua_comp **comps;  /* schema cache by component id (klua_comp_get): entries
                                * that never move while the world is open, or NULL */
    int32_t comps_cap;
    kiln_component *link_ids;  /* components with entity fields, ascending (klua_links) */
    int32_t link_count, link_cap;
    kiln_component links_scanned; /* ids up to this one are in link_ids when they link */
    const char **key_ptrs;     /* per key slot of the names table: the key's interned bytes */
    int32_t keys_count, keys_cap;
    /* klua_check_component's cache: a name's bytes (a key of the names table, so alive
     * and interned) -> its id */
    const char *name_ptr[KLUA_NAME_CACHE];
    kiln_component name_id[KLUA_NAME_CACHE];
    int gc_guard_ref;          /* registry ref: the guard that restarts the collector */
    bool gc_held;              /* a method stopped the collector (see klua_self) */
    int64_t gc_held_bytes;     /* Lua's heap when the collector was stopped */
    int64_t gc_owed_bytes;     /* allocated while held, not yet paid back in collector steps */
    uint8_t *scratch;          /* value conversion buffer (Lua allocator), 16-byte aligned */
    size_t scratch_size;
    /* A mod's view of the host's world (klua_new_world_view), else all NULL. */
    klua_world *host;          /* the host's World (lives longer than the view) */
    const klua_mod_hooks *mod_hooks;
    void *mod;                 /* the klua_mod, for the hooks */
    int *entry_depth;          /* counts entries into the mod's code (budget.c) */
    int guest_depth;           /* of a host's World: entries into mods' code under way */
    int32_t query_count;       /* live queries made through this World (mods:list shows a mod's) */
    int32_t mod_types;         /* of a host's World: component and event types mods registered new (never freed) */
    struct klua_query_link *queries; /* those queries (a mod's budget sums what they hold) */
    void (*on_release)(void *); /* called first when the world is released (mod manager) */
    void *on_release_ud;
    /* The mod manager's, set with on_release: whether mark is the tag of a loaded mod (*mine),
     * and then whether entities more of them (replacing: entities in place of its live ones,
     * a restore) fit its entity limit (false: why written). */
    bool (*load_owned)(klua_world *kw, kiln_component mark, int64_t entities, bool replacing, bool *mine,
                       char *why, size_t why_size);
};

/* A Lua system: what access checks need to know of the one running. C memory from the Lua
 * allocator, owned by systems.c (no Lua value a script could drop holds it): made by
 * world:system, freed by its fini, or by its World's release when it never joined. */
struct klua_system {
    klua_world *kw;
    lua_State *L;
    klua_system *next; /* in kw->systems */
    lua_Alloc alloc;   /* what made it, and frees it (klua_lasting_allocf) */
    void *alloc_ud;
    char name[KILN_MAX_NAME + 1];
    bool each;       /* an each-system: each(e, views..., dt) over its query, else run(world, dt);
                      * the function and the query are in the world's state (systems.c) */
    bool exclusive;
    kiln_component reads[KILN_SYSTEM_MAX_ACCESS], writes[KILN_SYSTEM_MAX_ACCESS];
    int read_count, write_count;
    int failures;    /* consecutive */
    int64_t each_cost; /* instructions an each callback runs at most (klua_bounded_cost), or -1 */
    uint64_t random[4];     /* persist.c: world:random's stream in this system (a kiln_random) */
    kiln_tick random_tick;  /* the tick it was forked for; 0: not yet */
};

#define KLUA_MAX_TERMS 32

enum klua_term_kind { TERM_DATA, TERM_TAG, TERM_LUA }; /* a term's values: fields, none, Lua */

/* A kiln.Query: the core query, its terms, and the one iteration it may run. */
/* The allocator of L for a block that outlives the call making it. lua_getallocf's, except
 * while a console statement runs: its allocator is then the console's wrapper, which counts
 * what the statement grows Lua's memory by and ends with the statement (console_budget.c);
 * this is the allocator under it. */
KLUA_HIDDEN lua_Alloc klua_lasting_allocf(lua_State *L, void **ud);

/* A World's live query, listed in C memory from the Lua allocator, not in the query's own
 * userdata: debug.setmetatable can take a query's finalizer away, and Lua then frees the
 * userdata without unlinking it. Such a query stays listed (and counted) until its World is
 * released, which frees the list; the kiln_query lives as long, held by the world. */
typedef struct klua_query_link {
    kiln_query *query;
    struct klua_query_link *prev, *next;
} klua_query_link;

typedef struct klua_query {
    klua_world *kw;
    kiln_query *query;
    int32_t term_count, with_count;
    kiln_component terms[KLUA_MAX_TERMS];
    uint8_t kind[KLUA_MAX_TERMS];
    bool writable[KLUA_MAX_TERMS];
    kiln_component_info info[KLUA_MAX_TERMS];
    uint8_t *snap[KLUA_MAX_TERMS]; /* per data term: the row's bytes when its view was filled
                                    * (in the query's own block, after this struct) */
    uint8_t *stage[KLUA_MAX_TERMS]; /* per data term: the row as its write-back converts it */
    int16_t key_off[KLUA_MAX_TERMS]; /* per term: its first field in the flat list of field keys */
    int16_t key_count;               /* field keys of all terms */
    bool upv_rows;                   /* the step closure holds views and keys as upvalues */
    bool all_floats[KLUA_MAX_TERMS]; /* per term: every field a single float, no check hook */
    bool lstep;                      /* q:each() hands out the Lua step (query.c), not the C one */
    bool step_made;                  /* the first q:each() made (or declined) the Lua step */
    uint8_t lstep_upv[KLUA_MAX_TERMS]; /* per data term: the Lua step's upvalue D<k>, or 0 */
    uint8_t lstep_vupv[KLUA_MAX_TERMS]; /* per data with-term: its upvalue V<k>, or 0 */
    int16_t data_fields;             /* fields of the data terms: the Lua step's arguments */
    kiln_iter it;
    bool active;
    int32_t row;
    klua_system *owner; /* the Lua system that began the running iteration, or NULL */
    lua_State *loop_L;  /* the thread that began it: a step or guard called from another thread
                         * belongs to an earlier loop of the query, ended meanwhile */
    int jit_height;     /* LuaJIT (jit_methods.c): stack slot of the frame whose loop runs */
    int jit_local;      /* LuaJIT: that frame's local holding the loop's generator, or 0; for
                         * q:bulk_ffi's loop -(the line its method is defined on in ffi.lua) */
    bool ffi_loop;      /* LuaJIT: the running iteration hands out FFI views (jit_views.c) */
    /* LuaJIT: set with ffi_loop by jit_views.c, which builds on this layer: empties the FFI
     * loop's row state when the loop ends, however it ends (klua_query_finish calls it) */
    void (*ffi_end_rows)(lua_State *L, int q_idx);
    uint64_t ffi_gen;   /* LuaJIT: counts FFI loops begun, so a debug view knows its own; from
                         * 1, round after 2^53 - 1 (exact as a Lua number): never in practice */
    struct klua_query_link *link; /* its entry in kw->queries */
} klua_query;

/* ---- support.c: errors, classes, the World behind a method, shared look-ups ---- */
/* Raises "bad argument #N to 'fname' (detail)"; arg is the stack index (methods: self is 1). */
KLUA_HIDDEN KLUA_NORETURN void klua_argerror(lua_State *L, int arg, const char *fname, const char *fmt, ...);
/* Raises "bad argument ... (expected expected, got <type>)". */
KLUA_HIDDEN KLUA_NORETURN void klua_typeerror(lua_State *L, int arg, const char *fname, const char *expected);
/* Raises "fname: detail". */
KLUA_HIDDEN KLUA_NORETURN void klua_fail(lua_State *L, const char *fname, const char *fmt, ...);
/* Raises the message alone, without luaL_error's "chunk:line:": for a hook's stop (a spent budget). */
KLUA_HIDDEN KLUA_NORETURN void klua_raise(lua_State *L, const char *fmt, ...);
/* Raises "fname: <the world's last error, without the core's call-name prefix>". */
KLUA_HIDDEN KLUA_NORETURN void klua_fail_world(lua_State *L, const kiln_world *world, const char *fname);
/* The detail of a core message: msg without its leading "kiln_xxx: ". */
KLUA_HIDDEN const char *klua_core_detail(const char *msg);
/* Whether s (len bytes) can name what kiln names (a component, event, field, system, entity or
 * scene entity): at most KILN_MAX_NAME bytes, no zero byte. A longer string is not read to its
 * end (a script's 24 MB one was measured and hashed at every call). */
static inline bool klua_name_ok(const char *s, size_t len) { return len <= KILN_MAX_NAME && strlen(s) == len; }
/* Pushes s quoted for a message: at most KLUA_QUOTE_MAX bytes, then "..."; returns it. */
KLUA_HIDDEN const char *klua_quote(lua_State *L, const char *s, size_t len);
/* Raises unless every key of the table at idx is a positive integer (when allow_list) or
 * one of the names in keys (NULL-terminated): unknown options never pass silently. */
KLUA_HIDDEN void klua_check_keys(lua_State *L, int idx, int arg, const char *fname,
                                 const char *const *keys, bool allow_list);
/* Creates the metatable tname with methods in __index (each method gets the metatable as
 * upvalue KLUA_UPV_META) and the metamethods; leaves nothing on the stack. */
KLUA_HIDDEN void klua_createmeta(lua_State *L, const char *tname, const luaL_Reg *methods,
                                 const luaL_Reg *metamethods);
/* Pushes the table getmetatable shows for class tname, {__name = tname, __index = a read-only
 * view of the methods table at methods_idx}. */
KLUA_HIDDEN void klua_push_public_meta(lua_State *L, const char *tname, int methods_idx);
/* Adds methods to the __index table of the existing class tname (same upvalue rule). */
KLUA_HIDDEN void klua_addmethods(lua_State *L, const char *tname, const luaL_Reg *methods);

/* ---- Classes. A userdata's class is its metatable and a tag: a host script holding the debug
 * library can put a class's metatable on any userdata (debug.setmetatable), so a method must
 * not take a userdata with the right metatable for an object of that class. Objects are made
 * by klua_newobject, which puts a tag for the class (its name mixed with an address no script
 * sees) after the struct; the checks below, and luaL_testudata / luaL_checkudata in every file
 * that includes this header, take a userdata only with the class's metatable and its tag. */
KLUA_HIDDEN void *klua_newobject(lua_State *L, size_t size, int nuvalue, const char *tname);
/* Whether the userdata p at idx carries the tag of class tname (its metatable not checked);
 * tname, as every class name, has 8 bytes or more with its NUL. */
KLUA_HIDDEN bool klua_has_tag(lua_State *L, int idx, const void *p, const char *tname);
KLUA_HIDDEN void *klua_testudata(lua_State *L, int idx, const char *tname);
/* The object of class tname at idx by its tag alone (its metatable not asked of the registry),
 * or NULL: for finalizers, which must free what is theirs whatever the host did to the
 * registry (debug.getregistry), and must never raise. */
KLUA_HIDDEN void *klua_toobject(lua_State *L, int idx, const char *tname);
KLUA_HIDDEN void *klua_checkudata(lua_State *L, int idx, const char *tname);
/* Registers class tname before its metatable is made, raising when an earlier class has the
 * same tag: every class name has 8 bytes or more, and no two share their first 8. */
KLUA_HIDDEN void klua_claim_class(lua_State *L, const char *tname);
#ifndef KLUA_SUPPORT_C
#define luaL_testudata(L, idx, tname) klua_testudata(L, idx, tname)
#define luaL_checkudata(L, idx, tname) klua_checkudata(L, idx, tname)
#endif

/* The userdata of class tname at argument 1 (self), or raises "calling 'class:method' on bad
 * self (tname expected, got ...)", as Lua's own checks do. */
KLUA_HIDDEN void *klua_check_self(lua_State *L, const char *tname, const char *class);
/* Names the C method at fn_idx name in bad-self messages after a Lua function of the layer
 * (lua/kiln) took its place in the method table and calls it (LuaJIT's world:spawn). */
KLUA_HIDDEN void klua_name_replaced(lua_State *L, int fn_idx, const char *name);
KLUA_HIDDEN klua_world *klua_check_world(lua_State *L, int idx); /* raises when closed */
/* The World a method was called on (argument 1), checked against the metatable the method holds as upvalue
 * KLUA_UPV_META. Raises when closed. Also holds the collector until the method returns or raises (rule 3), so no
 * __gc finalizer can change the world while the method holds pointers into it or its scratch. */
KLUA_HIDDEN klua_world *klua_self(lua_State *L);
/* klua_self without holding the collector, arguments padded: for hot methods (rule 3a). */
KLUA_HIDDEN klua_world *klua_self_unheld(lua_State *L);
/* klua_self without holding the collector: for methods that run Lua code (progress). */
KLUA_HIDDEN klua_world *klua_self_plain(lua_State *L);
/* A registry ref to a new to-be-closed guard that restarts the collector held for kw. */
KLUA_HIDDEN int klua_new_gc_guard(lua_State *L, klua_world *kw);
/* Holds the collector for the rest of the running C function (see klua_self). Restarting it
 * resets the collector's debt, so what the method allocated is paid back in explicit steps
 * (klua_release_gc); without that a loop of method calls would never collect its garbage. */
KLUA_HIDDEN void klua_hold_gc(lua_State *L, klua_world *kw);
/* Raises: the registry entry kw->names_ref is not the names table kiln made (a host script
 * replaced it through debug.getregistry(); every read of it checks its type first). */
KLUA_HIDDEN KLUA_NORETURN void klua_names_changed(lua_State *L);
KLUA_HIDDEN void klua_release_gc(lua_State *L, klua_world *kw);
/* A 16-byte-aligned buffer of at least size bytes owned by the world, reused call to call. Growing it keeps its
 * first bytes (what a caller converted before asking for more); the pointer is valid until the next call that asks
 * for scratch. Conversions into it run no Lua code. */
KLUA_HIDDEN uint8_t *klua_scratch(lua_State *L, klua_world *kw, size_t size);
/* Pushes the kiln.World userdata of kw (also outside world:progress). */
KLUA_HIDDEN void klua_push_self(lua_State *L, klua_world *kw);
/* Pushes the table at key (KLUA_STATE_*) of the state table of the World at world_idx, or
 * nil (returning false) where there is none. Read raw, assuming nothing of what lies there:
 * a host script holding the debug library can change a World's state (debug.setuservalue),
 * and callers inside the schedule or a finalizer must not raise. */
KLUA_HIDDEN bool klua_push_state(lua_State *L, int world_idx, const char *key);
/* The main thread of L's state: what outlives any coroutine. */
KLUA_HIDDEN lua_State *klua_main_thread(lua_State *L);
/* The world's schedule, created (with its job pool) on first use. */
KLUA_HIDDEN kiln_schedule *klua_schedule(lua_State *L, klua_world *kw);
/* Component by name (or id) at stack index idx; an unknown one raises an argument error
 * naming argument arg of fname. */
KLUA_HIDDEN kiln_component klua_check_component(lua_State *L, klua_world *kw, int idx, int arg,
                                                const char *fname);
/* The component named by s (n bytes, the string at idx), or with s NULL by the id at idx; else
 * KILN_NO_COMPONENT. Never raises, checks no access (the caller passes the name on to a method that does). */
KLUA_HIDDEN kiln_component klua_component_quiet(lua_State *L, klua_world *kw, int idx, const char *s, size_t n);
/* An entity handle at arg: a non-negative integer. */
KLUA_HIDDEN kiln_entity klua_check_entity(lua_State *L, int arg, const char *fname);
/* Raises "fname: entity 12v3 is not alive" unless e is alive. */
KLUA_HIDDEN void klua_check_alive(lua_State *L, klua_world *kw, kiln_entity e, const char *fname);
KLUA_HIDDEN const char *klua_entity_str(kiln_entity e, char *buf); /* buf of 24 bytes */
KLUA_HIDDEN bool klua_is_lua_valued(const klua_world *kw, kiln_component c);
/* The component whose layout a resource of this name uses (a data component or a tag), or
 * KILN_NO_COMPONENT: the name holds a Lua value (resources.c). */
KLUA_HIDDEN kiln_component klua_resource_layout(const klua_world *kw, const char *name, size_t len);
/* Whether the table at idx (saved Lua resources by name, string keys) holds a name that a
 * component of kw's world would hide (why says which). Allocates nothing. */
KLUA_HIDDEN bool klua_resources_hidden(lua_State *L, const klua_world *kw, int idx, char *why, size_t why_size);
KLUA_HIDDEN void klua_mark_lua_valued(lua_State *L, klua_world *kw, kiln_component c);
/* Whether the host's World kw declared component c when it existed already (a mod may have
 * registered it first): unloading that mod leaves c's values, the host's among them. */
KLUA_HIDDEN bool klua_host_declared(const klua_world *kw, kiln_component c);
/* Why a mod's view kw may not name component c (kiln's own, or the host's Lua-valued), pushed
 * and returned, or NULL (nothing pushed; always for the host's World). */
KLUA_HIDDEN const char *klua_unreachable(lua_State *L, const klua_world *kw, kiln_component c);
KLUA_HIDDEN void klua_mark_host_declared(lua_State *L, klua_world *kw, kiln_component c);
/* Room for c's flags in the host's World kw, with the allocator of L (kw's state): false when
 * it refuses. Then klua_mark_mod_registered (a mod registered c) cannot fail. */
KLUA_HIDDEN bool klua_flags_room(lua_State *L, klua_world *kw, kiln_component c);
KLUA_HIDDEN void klua_mark_mod_registered(klua_world *kw, kiln_component c);
KLUA_HIDDEN bool klua_mod_registered(const klua_world *kw, kiln_component c);

/* ---- access.c: declared access of the running Lua system ---- */
KLUA_HIDDEN const char *klua_system_name(const klua_world *kw); /* the Lua system running now, or NULL */
/* True unless a system runs that did not declare c in writes, or a mod's view kw may not write c. */
KLUA_HIDDEN bool klua_system_writes(const klua_world *kw, kiln_component c);
KLUA_HIDDEN bool klua_mod_readonly(const klua_world *kw, kiln_component c); /* kw a mod's view (mod_readonly.c) */
KLUA_HIDDEN void klua_mod_check_write(lua_State *L, klua_world *kw, kiln_component c, const char *fname); /* raises */
KLUA_HIDDEN kiln_result klua_mod_despawn(const klua_world *kw, kiln_entity e, bool tree); /* mod_readonly.c */
/* Raises unless the running system (if any) declared c (write: in writes); a mod's write of what mods only read. */
KLUA_HIDDEN void klua_check_access(lua_State *L, klua_world *kw, kiln_component c, bool write, const char *fname);

/* ---- determinism.c ---- */
/* 64 bits of the stream world:random draws from now (a Lua system's fork inside one, else the
 * world's main stream): math.random(0) in a mod's system. */
KLUA_HIDDEN uint64_t klua_random_bits(lua_State *L, klua_world *kw, const char *fname);

/* ---- values.c: Lua values <-> component bytes ---- */
/* Whether the number n read back from a view is the float was it was filled with: equal with
 * the same sign (-0.0 is a change from 0.0), or both NaN. Writes that change nothing are
 * skipped, so the comparison must see every change a byte would. */
static inline bool klua_same_float(lua_Number n, float was) {
    if (n == (lua_Number)was) return n != 0 || signbit(n) == signbit(was);
    return n != n && was != was;
}
/* Pushes the component value at data as a new table (or the Lua value / true for tags). */
KLUA_HIDDEN void klua_push_value(lua_State *L, klua_world *kw, kiln_component c, const void *data);
/* Writes every field of the value at data into the table at idx (raw sets); a vector,
 * matrix or array field that already holds a table there is refilled in place, so a table
 * reused call after call makes no garbage. data must be memory no Lua code can change. */
KLUA_HIDDEN void klua_fill_fields(lua_State *L, int idx, const kiln_component_info *info,
                                  const void *data);
/* Writes the fields of data component cc (the bytes at data, which no Lua code can change)
 * into the table at idx with raw sets of the schema cache's ready keys, refilling a vector,
 * matrix or array field's table in place as klua_fill_fields does; idx 0: into a new table, left on the stack. */
KLUA_HIDDEN void klua_fill_keyed(lua_State *L, klua_world *kw, const struct klua_comp *cc, int idx,
                                 const void *data);
/* Writes the fields of the table at idx into buf (a full value of c); missing fields keep
 * buf's bytes. Raises, naming fname, the entity and the component, on a bad field. */
KLUA_HIDDEN void klua_read_fields(lua_State *L, int idx, const kiln_component_info *info,
                                  void *buf, const char *fname, kiln_entity e);
/* Converts the value at idx for component c into buf (starting from its defaults); for
 * Lua-valued components takes a ref (written to buf) that the caller releases with
 * klua_unref_value if it does not hand buf to the world. */
KLUA_HIDDEN void klua_build_value(lua_State *L, klua_world *kw, kiln_component c, int idx,
                                  void *buf, const kiln_component_info *info, const char *fname,
                                  kiln_entity e);
KLUA_HIDDEN void klua_unref_value(lua_State *L, klua_world *kw, kiln_component c, const void *buf);
/* Fills buf with the value a component starts from when none is given: its defaults. */
KLUA_HIDDEN void klua_default_value(const kiln_component_info *info, void *buf);
/* Pushes one field's value. */
KLUA_HIDDEN void klua_push_field(lua_State *L, const kiln_field *f, const uint8_t *base);
/* Converts the Lua value at idx into the field's bytes at base; returns NULL on success or
 * a message (pushed on the stack) describing what is wrong. */
KLUA_HIDDEN const char *klua_to_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base);
/* klua_to_field for a write-back: base holds the bytes the value was read from, and a number
 * element still equal to what they read as keeps them (a uint64 past 2^63 - 1, which a write
 * refuses, an int64 past 2^53, which LuaJIT reads rounded, a NaN, whose payload a read may
 * lose: each left alone is left as it was). */
KLUA_HIDDEN const char *klua_restage_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base);
/* A float field's value from a Lua number: NULL, or a pushed message when out of range. */
KLUA_HIDDEN const char *klua_to_float(lua_State *L, lua_Number n, float *dest);
/* The field of info named name, or NULL. */
KLUA_HIDDEN const kiln_field *klua_find_field(const kiln_component_info *info, const char *name);
/* The field of info the string at idx names, or NULL (a non-string, or a string with a zero
 * byte: "x\0junk" is not x). */
KLUA_HIDDEN const kiln_field *klua_field_named(lua_State *L, const kiln_component_info *info, int idx);
/* Lua-valued components: store / fetch / release the value behind a ref. */
KLUA_HIDDEN int klua_value_ref(lua_State *L, klua_world *kw, int idx);
KLUA_HIDDEN void klua_value_push(lua_State *L, klua_world *kw, int ref);
KLUA_HIDDEN void klua_value_hook(void *ptr, int32_t count, void *ctx);
/* The values table of the World at world_idx: made (klua_new_world), dropped (its release,
 * after an owned world was destroyed). */
KLUA_HIDDEN void klua_values_new(lua_State *L, klua_world *kw, int world_idx);
KLUA_HIDDEN void klua_values_drop(lua_State *L, klua_world *kw, int world_idx);

/* ---- schema.c: components and event types from C-style schemas ---- */
/* Parses a C-style schema into fields (names copied into names_buf). Returns the field
 * count and fills size/align, or -1 with a message pushed. */
KLUA_HIDDEN int klua_parse_schema(lua_State *L, const char *schema, kiln_field *fields,
                                  char *names_buf, size_t names_size, size_t *size,
                                  size_t *align);
/* Registers the name (argument 2) and schema (argument 3: a C schema, nil for a tag, "lua"
 * for Lua values) as a component or an event type; returns its id. */
KLUA_HIDDEN uint32_t klua_define(lua_State *L, klua_world *kw, bool event, const char *fname);

/* ---- schema.c: the schema cache, what the hot methods need of a component ---- */
typedef struct klua_comp {
    kiln_component_info info; /* the world's description (its pointers live with the world) */
    int32_t key0;   /* slot of field 0's key in the names table (field i at key0 + i) */
    bool floats;    /* every field a single float */
    bool links;     /* some field holds entities (commands.c resolves placeholders in them) */
} klua_comp;
/* The cache entry of c (an id known to be registered), made the first time: that pushes the
 * field names as strings, so it may run the collector (rule 3a: call it before taking a
 * pointer into the world or the scratch, or check klua_comp_ready first). An entry stays
 * where it is until the world is released. */
KLUA_HIDDEN const klua_comp *klua_comp_get(lua_State *L, klua_world *kw, kiln_component c);
static inline const klua_comp *klua_comp_ready(const klua_world *kw, kiln_component c) {
    return c < (kiln_component)kw->comps_cap ? kw->comps[c] : NULL;
}
/* The field of cc whose name is the string at stack index idx (by its interned address,
 * else by its bytes), or NULL. */
KLUA_HIDDEN const kiln_field *klua_comp_field(lua_State *L, const klua_world *kw, const klua_comp *cc,
                                              int idx);
/* The world's components with entity fields (any registered since the last call are looked
 * at first), ascending, count in *count: the only ones whose values may hold placeholders.
 * Memory from the Lua allocator, freed with the cache. */
KLUA_HIDDEN const kiln_component *klua_links(lua_State *L, klua_world *kw, int32_t *count);
/* Frees the cache (the world is being released). */
KLUA_HIDDEN void klua_comp_free(lua_State *L, klua_world *kw);

/* ---- cost.c: the worst case of a long-running C library call ---- */
typedef enum klua_costly {
    KLUA_COST_REP, KLUA_COST_FIND, KLUA_COST_MATCH, KLUA_COST_GMATCH, KLUA_COST_GSUB,
    KLUA_COST_CONCAT, KLUA_COST_SORT, KLUA_COST_MOVE, KLUA_COST_INSERT, KLUA_COST_REMOVE,
    /* no cost of their own: the console guards them otherwise */
    KLUA_COST_SETHOOK, KLUA_COST_SETMETATABLE, KLUA_COST_DEBUG_SETMETATABLE, KLUA_COST_RESUME, KLUA_COST_JIT_ON,
    KLUA_COST_LOAD, KLUA_COST_NEWPROXY, KLUA_COST_XPCALL, KLUA_COST_CREATE, KLUA_COST_WRAP,
    KLUA_COST_LOADFILE, KLUA_COST_DOFILE /* charged as load of the file's text, which they read */
} klua_costly;
/* Bytes of a file loadfile and dofile may read in the console: the parser runs no hook, and
 * only load of a string can be handed to it in pieces with the clock read between them. */
#define KLUA_COST_FILE_MAX ((size_t)1 << 20)
#define KLUA_COST_BYTES_PER_STEP 8            /* bytes a C loop copies in one instruction's time */
#define KLUA_COST_JSON_UNIT 1024 /* a JSON save's unit (an entity, a value, an element): 1-1.5 us */
#define KLUA_COST_HASH_ENTITY 64 /* world:hash, content_hash, an entity: 20-90 ns */
#define KLUA_COST_HASH_SLOT 16   /* world:hash, content_hash, a slot not alive: 8-30 ns */
#define KLUA_COST_ELEMENT 16     /* an array element converted from Lua: 30-65 ns */
#define KLUA_COST_QUERY_ARCHETYPE 128 /* world:query, an archetype of the world: 30-800 ns */
#define KLUA_COST_LINK 8         /* a Parent link a check of a new link walked: 5-10 ns */
#define KLUA_COST_WALK 16        /* an archetype a read walks (q:count, q:each, q:entities,
                                  * world:entities), most of them empty: 7-15 ns */
#define KLUA_WALK_FREE 64        /* archetypes a read walks free: queries of a few pay nothing */
#define KLUA_SHORT_ARRAY 64      /* arrays up to this long are converted free */
#define KLUA_EMIT_RECORD_BYTES 32 /* what a queued emit holds besides its value (a mod pays it) */
#define KLUA_COST_RESULT_MAX ((double)(64 << 20)) /* bytes one wrapped call may build */
/* The steps and bytes the call of kind at hand (its arguments from stack index 1) may take
 * at worst; left is what the caller's budget has left (a long concat is refused early). */
KLUA_HIDDEN void klua_cost(lua_State *L, klua_costly kind, double left, double *steps, double *bytes);
/* The words of s[0, n) joining a parser jump list (and, or, elseif, break, goto): k take k * k / 4 steps. */
KLUA_HIDDEN double klua_jump_words(const char *s, size_t n);

/* ---- console_budget.c, seen from the world's methods ----
 * The reason a console statement running on L is out of time (its budget then spent: the
 * statement raises it at its next instruction), or NULL when no statement runs or it has time
 * left. A method whose one C call can run long (world:load) asks it as it goes. */
KLUA_HIDDEN const char *klua_console_overdue(lua_State *L);
/* Whether a console statement runs on L's state now (its hook counts, charges and times
 * everything: a budget armed inside it would replace that hook, so none is). */
KLUA_HIDDEN bool klua_console_active(lua_State *L);

/* What per-frame books are kept by: the tick, made new by each time a snapshot restore took
 * the tick back (a frame run again after a restore is a new frame: its budget was spent). */
static inline kiln_tick klua_frame_key(const kiln_world *world) {
    return kiln_tick_current(world) + (kiln_tick_epoch(world) << 40);
}

/* ---- budget.c: the instruction budget of one entry into Lua code ----
 * While armed on a state, a count hook charges the instructions of every thread of that
 * state to kw; once spent it raises at every instruction until disarmed, so a pcall cannot
 * swallow it. Wrapped library calls charge their worst case with klua_budget_charge. */
/* What set the deadline of the entry armed now: its own time limit, what was left of its
 * mod's clock for the frame, or what was left of the caller's time (a call into a mod). */
typedef enum klua_deadline_from { KLUA_DEADLINE_ENTRY, KLUA_DEADLINE_FRAME, KLUA_DEADLINE_CALLER } klua_deadline_from;
typedef struct klua_armed {
    lua_Hook hook;
    int mask, count;
    bool armed;
    bool framed; /* charged to the frame's budget of a mod's view */
    bool clocked; /* its time is charged to the frame's clock of a mod's view */
    double start; /* monotonic seconds when armed, while clocked */
} klua_armed;
/* Arms limit instructions (<= 0: none) for the entry what ("system 'move'", bounded) on
 * L's state; saved receives what to put back. Allocates nothing once the state has been
 * armed before (klua_budget_prepare). */
KLUA_HIDDEN void klua_budget_arm(lua_State *L, klua_world *kw, int64_t limit, const char *what,
                                 klua_armed *saved);
KLUA_HIDDEN void klua_budget_disarm(lua_State *L, klua_world *kw, const klua_armed *saved);
/* Makes the registry slot the hook reads, unless it is there (protected: when kiln opens in a
 * state, and when a mod's state is made), so that arming a budget never grows the registry. */
KLUA_HIDDEN void klua_budget_prepare(lua_State *L);
/* Charges steps to the budget armed on L's state (none armed: nothing); raises when they
 * would pass it, naming what the charge is for. */
KLUA_HIDDEN void klua_budget_charge(lua_State *L, double steps, const char *what);
/* Charges steps for work already done (a change that landed): raises nothing here, but past
 * the budget the next instruction raises, as when the count runs out. */
KLUA_HIDDEN void klua_budget_spend(lua_State *L, double steps);
/* Charges a read about to walk n archetypes (KLUA_COST_WALK each past KLUA_WALK_FREE): raises
 * when that does not fit, before the read starts. One compare when n is small (q:each's path). */
static inline void klua_budget_walk(lua_State *L, int64_t n, const char *what) {
    if (n > KLUA_WALK_FREE) klua_budget_charge(L, (double)(n - KLUA_WALK_FREE) * KLUA_COST_WALK, what);
}
/* Instructions left to the budget armed on L's state, or -1 when none is armed. */
KLUA_HIDDEN double klua_budget_left(lua_State *L);
/* A long C call's watch (a kiln_save_desc.progress) under the budget armed on L's state: it
 * counts steps_per_unit steps a unit reported and stops the call (false) once they would pass
 * what is left of the budget or the entry (or a console statement) is past its time limit. It never raises (it runs
 * inside kiln's code); after the call, klua_budget_watch_end raises why it stopped the call, or
 * charges the steps. With no budget armed it stops nothing and charges nothing. */
typedef struct klua_budget_watch {
    lua_State *L;
    double steps_per_unit, steps;
    bool stopped, timed_out;
    char late[160];
} klua_budget_watch;
KLUA_HIDDEN bool klua_budget_watch_report(void *watch, int64_t units);
/* klua_budget_watch_report of no units: a kiln_load_continue_fn (a C call's keep_going) that
 * stops it once the entry or console statement is past its time limit. */
KLUA_HIDDEN bool klua_budget_watch_continue(void *watch);
KLUA_HIDDEN void klua_budget_watch_end(klua_budget_watch *w, const char *what);
/* Whether the entry armed on L's state is past its time limit; its message then in why. */
KLUA_HIDDEN bool klua_budget_late(lua_State *L, char *why, size_t size);
/* lua_load of text s, handed to the parser 512 bytes at a time with the clock read between:
 * the parser runs no hook, and some input makes it quadratic (an and/or chain of 100k took
 * 18 s). Past the armed entry's time limit it stops, the limit's message pushed, LUA_ERRRUN. */
KLUA_HIDDEN int klua_budget_load(lua_State *L, const char *s, size_t n, const char *chunkname, const char *mode);
/* The rows of an each-system whose callback runs at most cost instructions (cost < 0: not
 * known to be bounded). While they run, the hook watches calls only and each row is charged
 * cost before the callback is called (klua_budget_row, right before lua_call); a call out of
 * the callback (a metamethod) counts every instruction again for the rest of the entry. */
KLUA_HIDDEN void klua_budget_rows_begin(lua_State *L, klua_world *kw, int64_t cost);
KLUA_HIDDEN void klua_budget_rows_end(lua_State *L, klua_world *kw);
KLUA_HIDDEN void klua_budget_row_charge(lua_State *L, klua_world *kw);
static inline void klua_budget_row(lua_State *L, klua_world *kw) {
    if (kw->row_cost > 0) klua_budget_row_charge(L, kw);
}

#if !KLUA_LUAJIT
/* ---- coroutine_body.c ----
 * A coroutine's body, upvalue 1 the function, run under a protected call of the coroutine's
 * own and its error raised again unchanged. Lua 5.4 leaves hooks off in a thread whose hook
 * raised, unless the error is caught in that thread: a coroutine a budget stopped otherwise
 * died so, and its pending __close handlers ran unhooked, with no count or clock, when it
 * was closed (at once by a coroutine.wrap function, or by coroutine.close later). Caught
 * inside, hooks come back on and the handlers close under the spent budget, each stopped at
 * its first instruction. Budgets that face hostile code (mods, the console) wrap bodies so. */
KLUA_HIDDEN int klua_coroutine_body(lua_State *L);
#endif

/* ---- bounded.c: Lua functions whose calls run a bounded number of instructions ---- */
/* The number of instructions of the Lua function at idx when it has no loop and calls
 * nothing itself (each runs at most once a call), else -1 (C functions, loops, calls). */
KLUA_HIDDEN int64_t klua_bounded_cost(lua_State *L, int idx);

/* ---- the classes: each opens itself and adds its World methods ---- */
KLUA_HIDDEN int klua_open_world(lua_State *L);   /* world.c: pushes kiln.world */
/* Pushes a World for world, the host's; owned: for a world it makes and owns (world NULL). */
KLUA_HIDDEN int klua_new_world(lua_State *L, kiln_world *world, bool owned, int32_t workers);
/* Pushes a mod's view of the host's World host onto L (another state): the same world and
 * schedule, which the view never closes, runs or reconfigures. */
KLUA_HIDDEN void klua_new_world_view(lua_State *L, klua_world *host, const klua_mod_hooks *hooks,
                                     void *mod, int *entry_depth);
KLUA_HIDDEN void klua_open_entities(lua_State *L);  /* entities.c */
KLUA_HIDDEN void klua_open_hierarchy(lua_State *L); /* hierarchy.c */
/* hierarchy.c: the Parent links the transform checks have walked (0 without transforms), and
 * the charge to the budget under way for those walked since before (a check of a Parent
 * write: set_parent, add, set), KLUA_COST_LINK each, spent after the call's change landed:
 * past the budget the next instruction raises, not the call. */
KLUA_HIDDEN int64_t klua_links_walked(const klua_world *kw);
KLUA_HIDDEN void klua_charge_links(lua_State *L, const klua_world *kw, int64_t before);
KLUA_HIDDEN void klua_open_events(lua_State *L);    /* events.c */
KLUA_HIDDEN void klua_open_resources(lua_State *L); /* resources.c */
KLUA_HIDDEN void klua_open_introspect(lua_State *L);/* introspect.c */
KLUA_HIDDEN void klua_open_query(lua_State *L);     /* query.c */
KLUA_HIDDEN void klua_open_bulk(lua_State *L);      /* bulk.c: q:bulk, after klua_open_query */
/* The Query at idx (self when idx is 1); raises (klua_query_gone) for a closed world or a released query. */
KLUA_HIDDEN klua_query *klua_query_check(lua_State *L, int idx);
KLUA_HIDDEN KLUA_NORETURN void klua_query_gone(lua_State *L, const klua_query *kq); /* iteration.c */
/* Starts the query's one iteration (access checked, recorded as an open loop) / ends it (views cleared, deferred
 * changes land; kiln_iter_fini's result); q_idx is the Query's stack index. klua_query_end, the end of a loop
 * that ran its course (done, left by break or return), raises "fname: ..." when its changes could not all land. */
KLUA_HIDDEN void klua_query_begin(lua_State *L, klua_query *kq, int q_idx, const char *fname);
KLUA_HIDDEN kiln_result klua_query_finish(lua_State *L, klua_query *kq, int q_idx);
KLUA_HIDDEN void klua_query_end(lua_State *L, klua_query *kq, int q_idx, const char *fname);
KLUA_HIDDEN int klua_world_query(lua_State *L);     /* world:query, also used by systems */
/* iteration.c: a Query's user values are in reach of debug.setuservalue, so every read of one checks
 * what it finds: pushes user value uv of the Query at q_idx, a table as kiln made it, and
 * returns true; anything else raises "fname: its state was changed through the debug library",
 * or with fname NULL (a finalizer, a close: they must not raise) pushes nothing and returns
 * false. C memory the query reads as bytes (its row snapshots) is never kept in one. */
KLUA_HIDDEN bool klua_query_uv(lua_State *L, int q_idx, int uv, const char *fname);
/* Pushes the term_count values at 1.. of the table at idx (a query's views), checked to be
 * tables as klua_query_uv checks (on a failure with fname NULL: nothing pushed, false). */
KLUA_HIDDEN bool klua_query_views(lua_State *L, const klua_query *kq, int idx, const char *fname);
/* iteration.c: moves the running iteration of the Query at q_idx to its next row; false (the
 * iteration finished) when there is none. */
KLUA_HIDDEN bool klua_query_advance(lua_State *L, klua_query *kq, int q_idx);
/* Pushes term t's value at the current row when t is a tag (true, or nil when an optional tag
 * is absent) or a "lua" term (its value, or nil) and returns true; returns false, pushing
 * nothing, for a data term, whose view the caller pushes. */
KLUA_HIDDEN bool klua_query_push_simple(lua_State *L, const klua_query *kq, int t);
/* Raises unless the running system is the one that began the loop. */
KLUA_HIDDEN void klua_query_check_owner(lua_State *L, const klua_query *kq);
/* True when the running iteration was begun by a thread other than L that still runs (it
 * resumed L, directly or not): what L closes then is an earlier loop's, ended meanwhile. */
KLUA_HIDDEN bool klua_query_runs_elsewhere(lua_State *L, const klua_query *kq);
/* Writes the current row back: each data term t with first[t] != 0 from one value per field
 * at stack slots first[t].. (only the fields that changed). Every term is converted and
 * checked before any is written, so an error leaves the whole row as it was. */
KLUA_HIDDEN void klua_query_write_row(lua_State *L, klua_query *kq, const int *first);
/* Makes the generated Lua step what q:each() hands out for the Query at q_idx, when it fits
 * (else the C step stays). */
KLUA_HIDDEN void klua_query_make_step(lua_State *L, klua_query *kq, int q_idx);
/* Runs fn (at stack index fn_idx) for every entity of the Query at q_idx, passing
 * (e, views..., extra) where extra is the value at extra_idx (or nothing when 0); fn_cost is
 * klua_bounded_cost of fn (or -1), so an armed budget can charge its rows whole. */
KLUA_HIDDEN void klua_query_each_call(lua_State *L, int q_idx, int fn_idx, int extra_idx, int64_t fn_cost);
/* Ends an iteration of the Query at q_idx that an error interrupted. */
KLUA_HIDDEN void klua_query_abort(lua_State *L, int q_idx);
/* Ends the iterations of kw left open: those begun by system owner (when its run ends), or,
 * with stuck_only, those whose thread can no longer end them (suspended in a coroutine or
 * dead). Their views stop working; their deferred changes land. */
KLUA_HIDDEN void klua_query_close_loops(lua_State *L, klua_world *kw, klua_system *owner,
                                        bool stuck_only);
KLUA_HIDDEN void klua_open_commands(lua_State *L);  /* commands.c */
KLUA_HIDDEN int klua_commands_new(lua_State *L);    /* kiln.commands() */
/* Makes the command buffers of mod state L take their placeholder tags from the mods' space
 * kept in the host's registry (host: its main thread, alive while L is), so a mod's
 * placeholders are never the host's, nor another mod's short of 2^32 - 1 mod batches (commands.c). */
KLUA_HIDDEN void klua_commands_link(lua_State *L, lua_State *host);
/* Makes the mods' placeholder tag counter in host state L's registry, when not there: called
 * as a manager is made, so that no mod's spawn allocates in the host. */
KLUA_HIDDEN void klua_commands_prepare_mods(lua_State *L);
KLUA_HIDDEN void klua_open_systems(lua_State *L);
/* Frees the systems made through kw that are left: none of them is in a schedule then (a
 * World's own were freed by their fini when its schedule went; a mod's view is released
 * once its systems left, and those staged by a load that failed never joined). */
KLUA_HIDDEN void klua_free_systems(klua_world *kw);
/* Appends a failure {system, message (len bytes), traceback, disabled[, mod]} to the failures
 * of the World at world_idx, which world:progress and world:failures hand out. Allocates. */
KLUA_HIDDEN void klua_push_failure(lua_State *L, int world_idx, const char *system, const char *message,
                                   size_t len, const char *traceback, bool disabled, const char *mod);   /* systems.c */
KLUA_HIDDEN void klua_open_persist(lua_State *L);   /* persist.c: save, load, names, clone */
KLUA_HIDDEN void klua_open_determinism(lua_State *L); /* determinism.c: seed, random, hash, snapshots */
KLUA_HIDDEN void klua_open_scene(lua_State *L);     /* scene.c: JSON prefabs, instantiate, export */
KLUA_HIDDEN void klua_open_scene_layer(lua_State *L, int layer); /* layer.spawn_all, spawn_into */
KLUA_HIDDEN void klua_open_session_layer(lua_State *L, int layer); /* session.c: the REPL's answers */

#endif
