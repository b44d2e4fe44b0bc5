/* klua.h: what the files of the Lua binding share: the state kept per kiln.World, value
 * conversion between Lua and component bytes, and access checks for running systems. */
#ifndef KLUA_H
#define KLUA_H

#include <lauxlib.h>
#include <lua.h>

#include "kiln.h"
#include "kiln_lua.h"

#if defined(__GNUC__)
#define KLUA_HIDDEN __attribute__((visibility("hidden")))
#else
#define KLUA_HIDDEN
#endif

#define KLUA_WORLD "kiln.World"
#define KLUA_QUERY "kiln.Query"
#define KLUA_COMMANDS "kiln.Commands"
#define KLUA_GUARD "kiln.IterGuard"

typedef struct klua_system klua_system;

/* Shared with destroy hooks of Lua-valued components, stored as a world resource so it
 * lives exactly as long as the world, even when the world outlives its Lua state. */
typedef struct klua_shared {
    lua_State *L;   /* NULL once Lua let go of the world */
    int values_ref; /* registry ref of the table holding Lua-valued components' values */
} klua_shared;

typedef struct klua_world {
    kiln_world *world;
    bool owned;                /* Lua destroys the world on close/collect */
    bool closed;
    klua_shared *shared;
    kiln_component shared_type;
    kiln_jobs *jobs;
    int32_t workers;
    kiln_schedule *schedule;
    klua_system *current;      /* the Lua system running now, for access checks */
    uint8_t *lua_valued;       /* per component id: 1 when it holds Lua values */
    int32_t lua_valued_cap;
    int32_t max_failures;      /* disable a system after this many consecutive failures */
    int progress_idx;          /* stack index of the world while world:progress runs */
    lua_State *run_L;          /* the thread running world:progress (systems run on it) */
    int names_ref;             /* registry ref: component name (interned) -> id */
    int gc_guard_ref;          /* registry ref: the guard that restarts the collector */
    bool gc_held;              /* a method stopped the collector (see klua_self) */
    uint8_t *scratch;          /* value conversion buffer (Lua allocator), 16-byte aligned */
    size_t scratch_size;
} klua_world;

/* ---- world (world.c) ---- */
KLUA_HIDDEN klua_world *klua_check_world(lua_State *L, int idx); /* raises when closed */
/* The World a method was called on (argument 1), checked against the metatable the method
 * holds as upvalue 1: no registry look-up. Raises when closed. It also stops the collector
 * until the method returns or raises (a to-be-closed guard restarts it), so no __gc
 * finalizer can change the world while the method holds pointers into it or its scratch. */
KLUA_HIDDEN klua_world *klua_self(lua_State *L);
/* klua_self without holding the collector: for methods that run Lua code (progress). */
KLUA_HIDDEN klua_world *klua_self_plain(lua_State *L);
/* Holds the collector for the rest of the running C function (see klua_self). */
KLUA_HIDDEN void klua_hold_gc(lua_State *L, klua_world *kw);
/* A 16-byte-aligned buffer of at least size bytes owned by the world, reused call to call.
 * Valid until the next call that asks for scratch; conversions into it run no Lua code. */
KLUA_HIDDEN uint8_t *klua_scratch(lua_State *L, klua_world *kw, size_t size);
KLUA_HIDDEN int klua_open_world(lua_State *L);  /* pushes the World metatable setup */
KLUA_HIDDEN int klua_new_world(lua_State *L, kiln_world *world, bool owned, int32_t workers);
/* Component by name (argument arg of function fname); raises naming both when unknown. */
KLUA_HIDDEN kiln_component klua_check_component(lua_State *L, klua_world *kw, int arg,
                                                const char *fname);
KLUA_HIDDEN kiln_entity klua_check_entity(lua_State *L, int arg, const char *fname);
KLUA_HIDDEN bool klua_is_lua_valued(const klua_world *kw, kiln_component c);
KLUA_HIDDEN const char *klua_entity_str(kiln_entity e, char *buf);
/* The main thread of L's state: what outlives any coroutine. */
KLUA_HIDDEN lua_State *klua_main_thread(lua_State *L);
KLUA_HIDDEN kiln_schedule *klua_schedule(lua_State *L, klua_world *kw);
/* Pushes the kiln.World userdata of kw (also outside world:progress). */
KLUA_HIDDEN void klua_push_self(lua_State *L, klua_world *kw);

/* ---- values (values.c) ---- */
/* Pushes the component value at data as a new table (or the Lua value / true for tags). */
KLUA_HIDDEN void klua_push_value(lua_State *L, klua_world *kw, kiln_component c, const void *data);
/* Writes the fields of the table at idx into buf (a full value of c); missing fields keep
 * buf's bytes. Raises, naming fname, the entity and the component, on a bad field. */
KLUA_HIDDEN void klua_read_fields(lua_State *L, int idx, const kiln_component_info *info,
                                  void *buf, const char *fname, kiln_entity e);
/* Pushes one field's value. */
KLUA_HIDDEN void klua_push_field(lua_State *L, const kiln_field *f, const uint8_t *base);
/* Converts the Lua value at idx into the field's bytes at base; returns NULL on success or
 * a message (pushed on the stack) describing what is wrong. */
KLUA_HIDDEN const char *klua_to_field(lua_State *L, int idx, const kiln_field *f, uint8_t *base);
/* The field of info named name, or NULL. */
KLUA_HIDDEN const kiln_field *klua_find_field(const kiln_component_info *info, const char *name);
/* Lua-valued components: store / fetch / release the value behind a ref. */
KLUA_HIDDEN int klua_value_ref(lua_State *L, klua_world *kw, int idx);
KLUA_HIDDEN void klua_value_push(lua_State *L, klua_world *kw, int ref);
KLUA_HIDDEN void klua_value_hook(void *ptr, int32_t count, void *ctx);

/* ---- schema (schema.c) ---- */
/* Parses a C-style schema into fields (names copied into names_buf). Returns the field
 * count and fills size/align, or -1 with a message pushed. */
KLUA_HIDDEN int klua_parse_schema(lua_State *L, const char *schema, kiln_field *fields,
                                  char *names_buf, size_t names_size, size_t *size,
                                  size_t *align);

/* ---- queries (query.c) ---- */
KLUA_HIDDEN int klua_open_query(lua_State *L);
KLUA_HIDDEN int klua_world_query(lua_State *L);
/* Runs fn (at stack index fn_idx) for every entity of the Query at q_idx, passing
 * (e, views..., extra) where extra is the value at extra_idx (or nothing when 0). */
KLUA_HIDDEN void klua_query_each_call(lua_State *L, int q_idx, int fn_idx, int extra_idx);

/* ---- introspection (introspect.c) ---- */
KLUA_HIDDEN int klua_world_components(lua_State *L);
KLUA_HIDDEN int klua_world_component_info(lua_State *L);
KLUA_HIDDEN int klua_world_stats(lua_State *L);

/* ---- commands (commands.c) ---- */
KLUA_HIDDEN int klua_open_commands(lua_State *L);
KLUA_HIDDEN int klua_commands_new(lua_State *L);

/* ---- systems (systems.c) ---- */
KLUA_HIDDEN int klua_world_system(lua_State *L);
KLUA_HIDDEN int klua_world_progress(lua_State *L);
KLUA_HIDDEN int klua_world_systems(lua_State *L);
KLUA_HIDDEN int klua_world_enable(lua_State *L);
KLUA_HIDDEN int klua_world_failures(lua_State *L);
KLUA_HIDDEN int klua_world_max_failures(lua_State *L);
/* The name of the Lua system running now, or NULL. */
KLUA_HIDDEN const char *klua_system_name(const klua_world *kw);
/* Raises unless the running system (if any) declared access to c (write: in writes). */
KLUA_HIDDEN void klua_check_access(lua_State *L, klua_world *kw, kiln_component c, bool write,
                                   const char *fname);

#endif
