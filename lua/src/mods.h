/* mods.h: what the mod manager's files share: a mod, its own Lua state and its books.
 * Invariant: a mod's lua_State is only closed when none of its code is on the C stack. */
#ifndef KLUA_MODS_H
#define KLUA_MODS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kiln_persist.h"
#include "klua.h"

#define KLUA_MODS "kiln.Mods"
#define KLUA_MOD_PATH 1024         /* longest path a mod may live at */
#define KLUA_MOD_MAX_DEPS 16
#define KLUA_MODS_MAX 256           /* mods one manager may hold */
#define KLUA_MODS_MAX_READONLY 64   /* names kiln.mods' readonly may list */
#define KLUA_MOD_MAX_COMPONENTS 256 /* components and event types one mod may declare */
#define KLUA_MOD_MAX_SYSTEMS 256    /* systems one mod may have in the schedule */
#define KLUA_MOD_MAX_FILES 64       /* files watched per mod (entry, manifest, required) */
#define KLUA_MOD_LOG_LINES 64
#define KLUA_MOD_LOG_LINE 240
/* Entities mods reshaped in one deferred section whose later reshapes there are told apart from
 * others' (twice as many slots): past that, every reshape counts as one that may make an archetype. */
#define KLUA_MOVED_SLOTS 1024
#define KLUA_MOD_ERROR 600
#define KLUA_MOD_MEM_STRIKES 3      /* entries failing for memory in a row before disabling */
#define KLUA_MOD_NAME_MAX (KILN_MAX_NAME - (int)KLUA_MOD_TAG_PREFIX_LEN) /* its tag component is "kiln.mod.NAME" */

typedef enum klua_mod_status {
    KLUA_MOD_RUNNING,  /* loaded, its systems in the schedule */
    KLUA_MOD_DISABLED, /* stopped for good (memory); its state is released */
} klua_mod_status;

typedef struct klua_mods klua_mods;

/* The memory of one mod's Lua state. The limit holds while mod code runs (depth > 0); kiln's
 * own bookkeeping between entries may pass it by a little rather than fail unprotected. */
typedef struct klua_mod_mem {
    size_t used, peak, limit;
    int depth;     /* entries into the mod's code under way (budget.c counts them) */
    int refused;   /* allocations refused since the last look */
    size_t floor;  /* the fewest bytes held since kiln last collected (LuaJIT's trigger, mods.c) */
} klua_mod_mem;

typedef struct klua_mod_file {
    char path[KLUA_MOD_PATH];
    time_t mtime;
    long mtime_ns;
    long long size;
} klua_mod_file;

typedef struct klua_mod {
    klua_mods *mods;
    char name[KILN_MAX_NAME + 1];
    char version[32];
    char path[KLUA_MOD_PATH];  /* what was loaded: the folder or the .lua file */
    char dir[KLUA_MOD_PATH];   /* the folder require searches ("" for a single file) */
    char entry[KLUA_MOD_PATH]; /* the entry file */
    char depends[KLUA_MOD_MAX_DEPS][KILN_MAX_NAME + 1];
    int depend_count;
    klua_mod_status status;
    lua_State *L;              /* the mod's own state; NULL once released */
    klua_world *kw;            /* its view of the world, in L */
    klua_mod_mem mem;
    kiln_random random;        /* math.random's state at the mod's top level */
    kiln_component tag;        /* on every entity it spawned */
    kiln_query *spawned;       /* over tag */
    kiln_component declared[KLUA_MOD_MAX_COMPONENTS];
    bool declared_event[KLUA_MOD_MAX_COMPONENTS];
    bool declared_first[KLUA_MOD_MAX_COMPONENTS]; /* its own: it registered it (else it was there), */
    bool declared_adopted[KLUA_MOD_MAX_COMPONENTS]; /* or took it over from a mod gone (mods.c) */
    int declared_count;
    char (*systems)[KILN_MAX_NAME + 1]; /* systems it added (some may have left since) */
    int system_count, system_cap;
    int64_t failures;          /* system runs that failed, over its life */
    int64_t dropped;           /* its queued changes the world dropped as they landed (mod_drops.c) */
    char dropped_error[KLUA_MOD_ERROR]; /* the last one's message ("" for none) */
    int mem_strikes;
    char error[KLUA_MOD_ERROR];
    klua_mod_file files[KLUA_MOD_MAX_FILES];
    int file_count;
    char log[KLUA_MOD_LOG_LINES][KLUA_MOD_LOG_LINE];
    int log_next;              /* ring position */
    int64_t log_total;         /* lines printed over its life */
    /* while its top level runs: systems staged until it succeeds */
    bool loading;
    struct klua_mod_staged *staged;
    int staged_count, staged_cap;
    struct klua_mod_spawn *load_spawns; /* entities spawned by the top level (taken back if it fails) */
    struct klua_mod_added *load_adds; /* components the top level added to entities it did not spawn */
    /* whether entities with its tag were there when its top level began (the previous
     * version's, those an unload kept); then its spawns, each put in from load_spawns when a
     * check next asks, are in a hash set with those of other mods' code it called (mod_undo.c),
     * in its memory (empty slots 0) */
    bool load_others;
    kiln_entity *load_set;
    int64_t load_set_cap, load_set_count, load_set_from;
    int64_t load_add_count, load_add_cap;
    kiln_component *load_resources; /* resources the top level set where there were none, */
    int load_resource_count, load_resource_cap; /* each once, in its memory (mod_undo.c) */
    kiln_commands *load_emits; /* the top level's emits, landing when it succeeds */
    int64_t pending_spawns;    /* spawned in the deferred section of tick pending_tick, not landed */
    int64_t pending_bytes;     /* what those spawns and the adds queued with them will hold */
    int64_t spawn_bytes;       /* the spawn under way (before_spawn to after_spawn) */
    int64_t event_bytes;       /* emitted during tick event_tick */
    kiln_tick event_tick;
    int64_t queued_bytes;      /* the despawn and removal records it queued during tick queued_tick */
    kiln_tick queued_tick;
    int64_t queued_asked;      /* what the call under way would queue: counted once it did */
    /* by declared index: its component's values on entities it did not spawn, made at its
     * first add of that component to one (NULL until then) */
    kiln_query *foreign[KLUA_MOD_MAX_COMPONENTS];
    /* what its rows hold (its entities' count and bytes, its components' values on others'),
     * counted over every archetype they match; kept while the world's changes count, its
     * declared components and its queries over others' stand (a spawn in a system is queued,
     * and moves no row), so the checks of each spawn and add do not count again */
    struct { uint64_t changes, spawn_at; int declared, foreign; bool valid; int64_t live, bytes; } rows;
    kiln_tick pending_tick;
    int64_t reshapes;          /* its own of mods->reshapes (counted at tick reshape_tick) */
    kiln_tick reshape_tick;
    int64_t load_spawn_count, load_spawn_cap;
    int64_t load_shown;        /* load_spawns before its latest call out of it (a proxy) */
    uint64_t load_calls;       /* mods->calls when its top level ended */
    struct klua_mod *previous; /* while reloading: the version still running */
    uint64_t generation;       /* proxies into this mod hold it (never 0, the host's) */
} klua_mod;

/* A spawn of a loading top level and its place among them (sorted by entity a while when the
 * load is taken back, mod_undo.c). */
typedef struct klua_mod_spawn {
    kiln_entity entity;
    int64_t at;
} klua_mod_spawn;

/* A component a loading top level added to an entity it did not spawn (mod_undo.c). */
typedef struct klua_mod_added {
    kiln_entity entity;
    kiln_component component;
} klua_mod_added;

/* A system a loading top level declared, copied until the load succeeds. */
typedef struct klua_mod_staged {
    kiln_system_desc desc;
    char name[KILN_MAX_NAME + 1];
    char before[KILN_SYSTEM_MAX_ORDER][KILN_MAX_NAME + 1];
    char after[KILN_SYSTEM_MAX_ORDER][KILN_MAX_NAME + 1];
    bool replace; /* the previous version has it: replaced in place (decided before adding) */
    bool bare;    /* in the schedule without its constraints and fini (a reload's commit, between passes) */
} klua_mod_staged;

/* The C stack of the thread that last crossed between states (c_stack.c). */
typedef struct klua_c_stack {
    pthread_t thread;
    bool measured;
    char *low;                /* its lowest address */
    size_t size;              /* its size, 0 unknown */
} klua_c_stack;

struct klua_mods {
    klua_world *kw;           /* the host's world */
    lua_State *host;          /* the host's main thread */
    size_t memory;            /* bytes per mod */
    int64_t instructions;     /* per entry into mod code */
    int64_t frame_instructions; /* per mod, all its system runs of one frame */
    int32_t milliseconds;     /* wall-clock backstop per entry (0: none) */
    int32_t frame_milliseconds; /* wall clock per mod, all its system runs of one frame (0: none) */
    int64_t entities;         /* live entities one mod may have spawned */
    int64_t world_memory;     /* bytes one mod may hold in the world (see held_bytes, mods.c) */
    int32_t queries;          /* live queries one mod may hold */
    int32_t archetypes;       /* the archetypes mods may make (their reshapes into new ones) */
    int32_t components;       /* new components and event types mods may register in the world */
    int32_t systems;          /* systems mods may have in the schedule, together (the rest: the host's) */
    int64_t reshapes;         /* spawns, adds and removes of mods that may make an archetype, since
                               * the world held seen (made now, queued in the deferred section of
                               * tick reshape_tick) */
    kiln_tick reshape_tick;
    int64_t reshape_base;     /* made when the first of those was counted */
    int64_t made;             /* archetypes mods' reshapes made (see klua_mod_check_archetypes) */
    int32_t seen;             /* the world's archetypes when made was brought up to date */
    int32_t moved_count;      /* entities in moved */
    kiln_entity moved[KLUA_MOVED_SLOTS]; /* open-addressed, 0 free: the entities mods reshaped in
                                          * the deferred section of tick reshape_tick */
    int64_t trim_at;          /* world bytes past which a mod's spawn or add trims first */
    uint64_t seed;
    kiln_component readonly[KLUA_MODS_MAX_READONLY]; /* read-only to mods (mod_readonly.c) */
    int32_t readonly_count;
    int allow_ref;            /* host registry: the table of granted globals, or LUA_NOREF */
    int log_ref;              /* host registry: log(mod, line), or LUA_NOREF */
    kiln_lua_mods_log_fn log_fn; /* a C host's log */
    void *log_user;
    kiln_drop_fn drop_prev;   /* the world's drop hook before the manager's (mod_drops.c) */
    void *drop_prev_ctx;
    lua_State *caller;        /* the host thread in a manager call, else NULL */
    klua_mod **list;          /* loaded mods, in load order */
    int count, cap;
    uint64_t generations;     /* loads begun: each takes the next as its generation */
    uint64_t calls;           /* proxy calls made (mod_copy.c): whoever they reached saw the world */
    klua_c_stack stack;       /* the C stack calls between mods nest on (c_stack.c) */
    klua_mod *loading;        /* the mod whose top level runs now (not listed yet), or NULL */
    klua_mod *landing;        /* the mod whose left-open loops kiln ends now, or NULL (mod_drops.c) */
    int held;                 /* its methods under way (each also counts as a guest of the world) */
    bool closed;
};

/* The files below mods.c (the sandbox, copies) find mods with these, so that no file calls
 * back into the one that calls it. */
static inline klua_mod *klua_mods_find(klua_mods *mods, const char *name) {
    for (int i = 0; i < mods->count; i++)
        if (strcmp(mods->list[i]->name, name) == 0) return mods->list[i];
    return NULL;
}

/* Whether the system called name is the mod's own now: one its state made that has not left
 * the schedule. mod->systems keeps every name it ever added, and a name it let go may be
 * another's since (the host's, another mod's), which must not be taken for its own. */
static inline bool klua_mod_runs(const klua_mod *mod, const char *name) {
    if (!mod->L || !mod->kw) return false;
    for (const klua_system *s = mod->kw->systems; s; s = s->next)
        if (strcmp(s->name, name) == 0) return true;
    return false;
}

/* The host thread to call into now: the one calling the manager, or the one running the
 * frame, or the main thread. */
static inline lua_State *klua_mods_host_thread(klua_mods *mods) {
    if (mods->caller) return mods->caller;
    if (mods->kw->run_L) return mods->kw->run_L;
    return mods->host;
}

/* The mod whose state thread L belongs to (listed, or loading), or NULL for the host's. */
static inline klua_mod *klua_mods_of_thread(klua_mods *mods, lua_State *L) {
    lua_State *main = klua_main_thread(L);
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i]->L == main) return mods->list[i];
    if (mods->loading && mods->loading->L == main) return mods->loading;
    return NULL;
}

/* ---- mod_sandbox.c: a mod's own state and globals ---- */
/* Makes mod->L with its allocator and its sandboxed globals (world, kiln, mod, the safe
 * library); NULL with a message in mod->error when out of memory. */
KLUA_HIDDEN lua_State *klua_mod_state(klua_mod *mod);
/* The allocator of mod->L (ud &mod->mem), also for what kiln keeps for the mod outside its
 * state and charges to its limit; it does not need the state, which may be closed. */
KLUA_HIDDEN void *klua_mod_mem_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Runs the chunk file at path (text only) in the mod's globals under its budget; false
 * with mod->error set when it fails to load or run. */
KLUA_HIDDEN bool klua_mod_run_file(klua_mod *mod, const char *path);
/* Appends a line to the mod's log and hands it to the host's log. */
KLUA_HIDDEN void klua_mod_log(klua_mod *mod, const char *line, size_t len);

/* ---- mods_options.c: kiln.mods' options and a C host's desc ---- */
/* Reads kiln.mods' opts (a table at 2; raises naming the option otherwise) into desc, the
 * readonly names into readonly (KLUA_MODS_MAX_READONLY + 1); leaves opts.allow and opts.log
 * pushed, in that order. */
KLUA_HIDDEN void klua_mods_read_options(lua_State *L, kiln_lua_mods_desc *desc, const char **readonly,
                                        const char *fname);
/* Raises unless each limit of a C host's desc is 0 (its default) or one kiln.mods accepts. */
KLUA_HIDDEN void klua_mods_check_desc(lua_State *L, const kiln_lua_mods_desc *d);

/* ---- mod_readonly.c: what the host keeps read-only to mods (klua_mod_readonly: klua.h) ---- */
/* Reads kiln.mods' opts.readonly (opts at index opts) into names (KLUA_MODS_MAX_READONLY + 1),
 * NULL-terminated and anchored by opts; NULL when absent. Raises for a value not a list of names. */
KLUA_HIDDEN const char *const *klua_mods_readonly_option(lua_State *L, int opts, const char **names,
                                                         const char *fname);
/* The ids of names (NULL-terminated, or NULL) into dest (KLUA_MODS_MAX_READONLY); returns how
 * many. Raises for a name the world has no component of, or past the most. */
KLUA_HIDDEN int32_t klua_mods_readonly_resolve(lua_State *L, klua_world *kw, const char *const *names,
                                               kiln_component *dest);
/* mods:readonly(name, ...) (the manager between frames): adds the names at 2.. to mods' list.
 * Raises for a name that is not the host's component or past the most; returns true, or nil
 * and a message naming the system and mod when a running mod's system lists one in writes
 * (nothing added). */
KLUA_HIDDEN int klua_mods_readonly_add(lua_State *L, klua_mods *mods, const char *fname);
/* Whether the manager of mod view kw keeps anything read-only. */
KLUA_HIDDEN bool klua_mods_any_readonly(const klua_world *kw);
/* Raises before mod view kw despawns e when e holds a component read-only to mods. */
KLUA_HIDDEN void klua_mod_check_despawn(lua_State *L, klua_world *kw, kiln_entity e, const char *fname);

/* ---- mod_copy.c: values between states ---- */

/* Copies the value at idx of from onto to's stack: nil, booleans, numbers, strings and
 * tables of those (no cycles, bounded depth and size); functions become proxies calling
 * into their state (callee: the mod that owns from, or NULL for the host). Call under a
 * pcall of to; raises there with a message naming what cannot be copied. */
KLUA_HIDDEN void klua_mod_copy(lua_State *from, int idx, lua_State *to, klua_mods *mods,
                               klua_mod *callee, const char *what);
/* Lets go of the functions state F (the host's or a mod's, between its code) keeps for proxies
 * in other states that were collected since (a proxy's collection only marks them). */
KLUA_HIDDEN void klua_mod_settle_proxies(lua_State *F);
/* The same for the host's state and every mod's not running (the manager, between frames). */
KLUA_HIDDEN void klua_mods_settle_proxies(klua_mods *mods);
/* Pushes onto L a copy of the exports of dependency dep, for mod (protected by caller). */
KLUA_HIDDEN void klua_mod_push_exports(lua_State *L, klua_mod *mod, klua_mod *dep);

/* ---- c_stack.c: the C stack calls between states nest on ---- */
/* True when less than reserve bytes of the running thread's C stack are left (a quarter of
 * a stack under 4 MiB at most); false where the stack cannot be measured (not glibc). The
 * thread's bounds are measured once into stack, again when another thread asks. */
KLUA_HIDDEN bool klua_c_stack_short(klua_c_stack *stack, size_t reserve);

/* ---- mod_files.c: manifests, folders, order, stamps ---- */
/* Reads what path is (a folder with mod.lua, or a single name.lua) into mod's name,
 * version, depends, dir and entry; false with mod->error set. */
KLUA_HIDDEN bool klua_mod_describe(klua_mod *mod, const char *path);
/* Records the stamp of a file the mod loaded (for poll). */
KLUA_HIDDEN void klua_mod_watch(klua_mod *mod, const char *path);
/* True when a watched file changed since it was stamped. */
KLUA_HIDDEN bool klua_mod_changed(const klua_mod *mod);
/* The dependency of mod through which the loaded mods' depends lead back to mod's name (mod
 * itself included), or NULL: a reload whose manifest would close such a circle is refused. */
KLUA_HIDDEN const char *klua_mod_depends_back(klua_mods *mods, const klua_mod *mod);
/* Stamps every file mod watches as it is now (a broken save is then not retried every poll). */
KLUA_HIDDEN void klua_mod_restamp(klua_mod *mod);
/* Loads the Lua source file at path as a chunk (text only, named "@path"), as
 * luaL_loadfilex(L, path, "t") does, but opened without blocking and refused unless it is a
 * regular file of at most KLUA_MOD_SOURCE_MAX bytes: a mod cannot make its host wait on a
 * pipe or read a device. Returns a status and pushes the chunk or the message. */
#define KLUA_MOD_SOURCE_MAX (16 << 20)
KLUA_HIDDEN int klua_mod_loadfile(lua_State *L, const char *path);
/* True when path, resolved, lies inside folder dir (both resolved; no symlink escapes). */
KLUA_HIDDEN bool klua_mod_inside(const char *dir, const char *path, char *resolved);

/* ---- mods_account.c: what a mod holds, against its limits ---- */
/* The bytes mod holds in world (its world_memory budget): the rows of the entities it
 * spawned (every value on them, whoever added it, with ticks, handles and records), the
 * values of its own components on entities it did not spawn once it has added one there,
 * the resources of its own components, what it queued in the deferred section under way,
 * the events it emitted this tick, and what its live queries hold (klua_mod_query_bytes).
 * The rows are counted over the archetypes they match only when rows moved since. */
KLUA_HIDDEN int64_t klua_mod_held_bytes(klua_mod *mod, kiln_world *world);
/* The bytes the queries mod's code made hold in C (kiln_query_memory), while they live, and
 * those of the queries kiln keeps over its components on others' entities. */
KLUA_HIDDEN int64_t klua_mod_query_bytes(const klua_mod *mod);
/* Its live entities (the entities with its tag, counted only when rows moved since). */
KLUA_HIDDEN int64_t klua_mod_live(klua_mod *mod, kiln_world *world);
/* Whether a mod loading afresh may take back the entities the world keeps with its tag (an
 * unload's keep, under this manager or an earlier one): false past opts.entities, with
 * mod->error set, as world:load and world:restore refuse such entities. */
KLUA_HIDDEN bool klua_mod_kept_fit(klua_mod *mod, kiln_world *world);
/* Counts the spawn that just landed (not deferred) as its archetype's row, when nothing else
 * moved since its checks counted the rows (else they are counted again when next asked). */
KLUA_HIDDEN void klua_mod_count_spawn(klua_mod *mod, kiln_world *world);
/* Its spawns queued in the deferred section under way (forgetting those that landed). */
KLUA_HIDDEN int64_t klua_mod_pending_spawns(klua_mod *mod, kiln_world *world);
/* Raises when more bytes would take mod past its world_memory (what names the call). */
KLUA_HIDDEN void klua_mod_check_held(lua_State *L, klua_mod *mod, kiln_world *world, int64_t more, const char *what);
/* The view's before_remove, before_despawn_tree and before_queue_remove hooks (this one for a
 * removal before_remove does not ask about: e lacks c now, and a change queued before may give
 * it c by the time it lands):
 * klua_mod_before_remove's and klua_mod_before_despawn_tree's checks, then, the world
 * deferred, the records the call queues (one a despawn of each entity of a tree) checked with
 * the frame's others against world_memory (raises past it); klua_mod_queued (the queued hook)
 * counts them once the call queued them (one that failed counts nothing). */
KLUA_HIDDEN void klua_mod_queue_remove(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const char *fname);
KLUA_HIDDEN void klua_mod_queue_despawn_tree(lua_State *L, klua_world *kw, kiln_entity root, const char *fname);
KLUA_HIDDEN void klua_mod_queue_plain_remove(lua_State *L, klua_world *kw, const char *fname);
KLUA_HIDDEN void klua_mod_queued(klua_world *kw);
/* Raises when a spawn, add or remove by mod could make one archetype past the mods' limit or
 * its share of the room the frame left (see mods_account.c), else counts it. */
KLUA_HIDDEN void klua_mod_check_archetypes(lua_State *L, klua_mod *mod, bool fresh, const char *what);
/* Raises when mod's system d (its klua_system the desc's user) would take mod past its
 * KLUA_MOD_MAX_SYSTEMS, or the mods together past opts.systems (see mods_account.c). */
KLUA_HIDDEN void klua_mod_check_systems(lua_State *L, klua_mod *mod, const kiln_system_desc *d, const char *fname);
/* Whether a spawn of the count components in comps (and the mod's tag), or an add (add) or
 * removal of c to or from e, lands in an archetype the world holds, so makes none. */
KLUA_HIDDEN bool klua_mod_spawn_lands(klua_mod *mod, const kiln_component *comps, int32_t count);
KLUA_HIDDEN bool klua_mod_move_lands(klua_mod *mod, kiln_entity e, kiln_component c, bool add);
/* The host World's load_owned (klua.h): whether mark is the tag of a loaded mod (*mine), and
 * then whether its limit takes entities more beside its live and queued ones (replacing: beside
 * its queued ones only) (else false, why). */
KLUA_HIDDEN bool klua_mods_load_owned(klua_world *kw, kiln_component mark, int64_t entities, bool replacing,
                                      bool *mine, char *why, size_t why_size);

/* ---- mod_drops.c: the mods' queued changes the world dropped as they landed ---- */
/* Sets the manager's drop hook on its world (calling on to the one there), and takes it off. */
KLUA_HIDDEN void klua_mods_watch_drops(klua_mods *mods);
KLUA_HIDDEN void klua_mods_unwatch_drops(klua_mods *mods);
/* The mod view's hook of that name (klua_mod_hooks): its mod's count and last message. */
KLUA_HIDDEN int64_t klua_mod_dropped(klua_world *kw, const char **message);
/* Sets the fields dropped and dropped_error (when any) of the mods:list entry at the top. */
KLUA_HIDDEN void klua_mod_push_drops(lua_State *L, const klua_mod *mod);
/* Ends, on L (kw's state's thread), the loops kw left open under kw->current; what their ends
 * land and the world drops counts as owner's (NULL: as drop_owner finds it), owner being the
 * mod whose code queued it (a top level or an export left them open). Never raises. */
KLUA_HIDDEN void klua_mods_end_loops(klua_mods *mods, lua_State *L, klua_world *kw, klua_mod *owner);
/* A reload's books: to adds from's drops to its own, and takes from's last message when from's
 * came later (a failed reload's top level gives its drops to the old version, which runs on;
 * a reload that succeeds keeps the old version's beside its top level's own). */
KLUA_HIDDEN void klua_mod_carry_drops(klua_mod *to, const klua_mod *from, bool later);

/* ---- mod_undo.c: what a failed top level takes back beyond its spawns and registrations ----
 * Its top level begins: notes whether entities with its tag are there already (those a failed
 * load cannot take back), then marks it the manager's loading mod. */
KLUA_HIDDEN void klua_mod_load_begin(klua_mod *mod);
/* Code of another mod's that the top level of loading called spawned e: a top level may despawn
 * and reshape it as one of its own (a failed load leaves it, as it leaves what the code did).
 * Raises for memory, e unspawned. */
KLUA_HIDDEN void klua_mod_note_guest_spawn(lua_State *L, klua_mod *loading, kiln_world *world, kiln_entity e);
/* The mod view's hooks of the same names (klua_mod_hooks in klua.h). */
KLUA_HIDDEN void klua_mod_before_remove(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c,
                                        const char *fname);
/* (before_despawn_tree's also returns how many entities the tree holds, root included, when
 * it walked it: the world deferred, a mod loading or anything read-only; else 1) */
KLUA_HIDDEN int64_t klua_mod_before_despawn_tree(lua_State *L, klua_world *kw, kiln_entity root, const char *fname);
KLUA_HIDDEN void klua_mod_before_add(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c);
KLUA_HIDDEN void klua_mod_before_resource(lua_State *L, klua_world *kw, kiln_component c, bool set,
                                          const char *fname);
KLUA_HIDDEN void klua_mod_before_change(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c,
                                        const void *value, const char *fname);
KLUA_HIDDEN kiln_commands *klua_mod_emits(lua_State *L, klua_world *kw);
/* The top level of mod (loading) failed, or the call that loaded it takes it back: takes its
 * adds to entities there before it ran off again, the latest first, and the resources it made
 * out of the world, and drops its emits. */
KLUA_HIDDEN void klua_mod_load_undo(klua_mod *mod, kiln_world *world);
/* The top level of mod failed: takes its spawns back, the latest first, each with its slot as
 * it was (kiln_unspawn) down to the latest whose handle may have left the mod (shown to code
 * outside it, held by an entity field of the world); from there on they are despawned, their
 * generations spent, so a handle kept somewhere never names another entity. */
KLUA_HIDDEN void klua_mod_load_unspawn(klua_mod *mod, kiln_world *world);
/* The top level of mod succeeded and the call that loaded it keeps it: its emits land, in
 * order (out of memory: the rest are dropped, as a frame's would be), its spawns are its own. */
KLUA_HIDDEN void klua_mod_load_keep(klua_mod *mod, kiln_world *world);
/* Frees what the two above keep. */
KLUA_HIDDEN void klua_mod_load_free(klua_mod *mod);

/* ---- mods.c: the lifecycle ---- */
/* The manager's books, in the host state's allocator. */
static inline void *klua_mods_alloc(klua_mods *mods, void *p, size_t old, size_t size) {
    void *ud;
    lua_Alloc fa = lua_getallocf(mods->host, &ud);
    return fa(ud, p, old, size);
}
KLUA_HIDDEN bool klua_mods_grow(klua_mods *mods, void **p, int *cap, int need, size_t item);
/* Why no lifecycle change can happen now (a frame runs, mod code runs), or NULL. */
KLUA_HIDDEN const char *klua_mods_busy(klua_mods *mods);
/* Loads the mod at path, or the next version of previous (not yet in the list); NULL with
 * the reason in err, the world as it was. The loaded mod's top level's adds to others'
 * entities and its emits wait until the caller settles them with klua_mod_load_keep, or
 * takes the load back with klua_mods_take_back. */
KLUA_HIDDEN klua_mod *klua_mods_load(klua_mods *mods, const char *path, klua_mod *previous, char *err,
                                     size_t size);
/* Its entities go, its components leave every entity (unless keep or another mod uses them),
 * then its systems leave, its state closes, it leaves the list. False with err when the world
 * could not be cleared for memory: the mod stays loaded, and a second call finishes. */
KLUA_HIDDEN bool klua_mods_unload(klua_mods *mods, klua_mod *mod, bool keep, char *err, size_t size);
/* Takes back a load its call cannot finish (out of memory after it): its top level's adds to
 * others' entities and its emits (klua_mod_load_undo), its spawns (klua_mod_load_unspawn; all
 * count as shown after a call out since its top level ended), then as klua_mods_unload does,
 * but entities an unload kept of it before this load stay, kept as they were. */
KLUA_HIDDEN void klua_mods_take_back(klua_mods *mods, klua_mod *mod);
/* ---- mod_unload.c: what a going mod takes out of the world ---- */
/* Takes drop[0..count) off every entity and their resources out of the world, then despawns
 * the entities of spawned (NULL: none; those with tag keep their components until then). All
 * it needs is made first: false with err (may be NULL) when that is refused, the world as it
 * was, or when a removal is (an archetype to make), the despawns not done. */
KLUA_HIDDEN bool klua_mod_clear(klua_mods *mods, kiln_query *spawned, kiln_component tag,
                                const kiln_component *drop, int count, char *err, size_t size);
/* Hands the components mod owns that another loaded mod declared too (so the unload left them)
 * to the first such mod in load order, as if it had registered them; the host's stay its own. */
KLUA_HIDDEN void klua_mod_hand_over(klua_mods *mods, const klua_mod *mod);
/* Reloads in place (and the mods depending on it); false with err, the old version on.
 * failed (room for KLUA_MODS_MAX) gets the dependents whose reload failed. */
KLUA_HIDDEN bool klua_mods_reload(klua_mods *mods, klua_mod *old, char *err, size_t size, klua_mod **failed,
                                  int *failed_count);
/* Whether the staged systems, those marked replace in place of the running version's, leave
 * the schedule's before/after without a cycle (mod_order.c); false with mod->error. */
KLUA_HIDDEN bool klua_mod_order_check(klua_mod *mod);
/* Releases the states of disabled mods whose systems have left. */
KLUA_HIDDEN void klua_mods_sweep(klua_mods *mods);
/* Closes every mod's state (the world's on_release, the manager's __gc). */
KLUA_HIDDEN void klua_mods_close_all(void *mods);
/* The manager's __gc: klua_mods_close_all unless the manager is held or busy (a script calling
 * __gc early from code a mod's call reaches). */
KLUA_HIDDEN void klua_mods_collect(klua_mods *mods);
/* mods:close on the host thread L: as klua_mods_close_all, then the host's state lets go of
 * what the closed states' proxies held (which a finalizer's close does not touch). */
KLUA_HIDDEN void klua_mods_close(klua_mods *mods, lua_State *L);

KLUA_HIDDEN void klua_open_mods(lua_State *L); /* adds kiln.mods */

#endif /* KLUA_MODS_H */
