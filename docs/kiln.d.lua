---@meta kiln
-- kiln.d.lua: Lua language server annotations for the kiln module (`require "kiln"`).
-- Not loaded at run time. Add this folder to `workspace.library` so editors complete the
-- API; the reference is docs/lua-api.md.

---An entity handle: a 64-bit integer below 2^53 (32-bit index, 21-bit generation).
---`kiln.handle(e)` formats it as "12v3".
---@alias entity integer

---A placeholder a command buffer returned from `cmd:spawn`: a negative integer that
---stands for the entity the buffer will spawn.
---@alias kiln.placeholder integer

---A component named by its string, or by the id `world:component` returned.
---@alias kiln.component string|integer

---A component value as Lua sees it: a table of fields for a data component, `true` for a
---tag, any Lua value for a script-only ("lua") component.
---@alias kiln.value table<string, any>|boolean|any

---`vec2`, `vec3` and `vec4` fields; keys left out keep their value when written.
---@class kiln.Vec
---@field x number
---@field y number
---@field z? number
---@field w? number

---`quat` fields: x, y, z, w (cglm versor order).
---@class kiln.Quat
---@field x number
---@field y number
---@field z number
---@field w number

---`mat4` fields: 16 numbers, column by column (elements 13, 14, 15 are the translation).
---@alias kiln.Mat4 number[]

---A row view from `q:each()`: a table of the component's fields that reads and writes the
---current row. Valid only inside its loop.
---@alias kiln.View table<string, any>

---A term of the bulk path: one array per field (`t.x[i]` is row i's x), `true` for a tag,
---`false` for an optional term the chunk lacks.
---@alias kiln.BulkTerm table<string, any[]>|boolean

---@class kiln
---@field version string The module version, "0.1.0".
local kiln = {}

---@class kiln.WorldOptions
---@field workers? integer Threads of the job pool C systems run on (0 to 64; default 0: inline).
---@field max_failures? integer Disable a Lua system after this many consecutive failures (default 0: never).
---@field instructions? integer The instruction budget of one Lua system run (default 0: none).
---@field transforms? boolean Add the C transform propagation system to the schedule.

---Creates a world that Lua owns (destroyed by `world:close()`, a `<close>` variable or
---garbage collection).
---@param options? kiln.WorldOptions
---@return kiln.World
function kiln.world(options) end

---Creates an empty command buffer, not tied to a world.
---@return kiln.Commands
function kiln.commands() end

---How many entities `world:spawn` made on `world` through LuaJIT's FFI path (0 under Lua 5.4
---and in mods).
---@param world kiln.World
---@return integer
function kiln.ffi_spawns(world) end

---Formats an entity as "index v generation", e.g. "12v3".
---@param e entity
---@return string
function kiln.handle(e) end

---Reads a handle back from its text ("12v3"); an integer handle is returned as it is.
---Raises `bad argument #1 to 'kiln.entity' (...)` for anything else.
---@param text string|entity
---@return entity
function kiln.entity(text) end

---How the REPL shows a value: entities (with a world) as `world:inspect`, queries as
---`q:format`, component infos as their schema, system lists as tables, other values on one
---line.
---@param value any
---@param world? kiln.World
---@return string
function kiln.pretty(value, world) end

---Lays out rows of strings under a header, columns padded, with "... N more" when `more` > 0.
---@param header string[]
---@param rows string[][]
---@param more? integer
---@return string
function kiln.table_text(header, rows, more) end

---Formats a `world:systems()` list as a table.
---@param list kiln.SystemInfo[]
---@return string
function kiln.systems_text(list) end

---@class kiln.SessionOptions
---@field remote? boolean The session serves a console client: `:step` and `:run` are refused.
---@field dt? number The dt `:step` passes to `world:progress` (default 1/60).
---@field answer_bytes? integer The most bytes of a statement's answer kept (default: no limit); the rest is counted, never built.

---Creates a REPL session evaluating in `env` (default `_G`); its world is `env.world`.
---@param env? table
---@param opts? kiln.SessionOptions
---@return kiln.Session
function kiln.session(env, opts) end


---@class kiln.ModsOptions
---@field memory? integer Bytes of Lua memory per mod (default 64 MiB, at least 256 KiB).
---@field instructions? integer Instructions per entry into a mod's code (default 10 million).
---@field frame_instructions? integer All of one mod's system runs in a frame (default 4 x instructions).
---@field milliseconds? integer Wall-clock backstop per entry (default 1000; -1: none).
---@field frame_milliseconds? integer Wall clock all of one mod's system runs in a frame may take together (default: milliseconds; -1: none).
---@field entities? integer Live entities one mod may have spawned (default 1 million).
---@field world_memory? integer Bytes one mod may hold in the world: its entities' rows, its components on others, its resources, its events of a frame, its queries (default 256 MiB).
---@field queries? integer Live queries one mod may hold (default 256).
---@field archetypes? integer Once mods made this many archetypes (counting one for each spawn, add or remove mods queued in a frame that may make one; the host's do not count), mods may not spawn, add or remove into a new archetype (default 8192).
---@field components? integer New components and event types mods may register in the world, all mods together and for good: the world never frees a registration (default 4096).
---@field systems? integer Systems all mods together may have in the schedule (default 2048, at most 4096).
---@field seed? integer Seeds each mod's `math.random` (with the mod's name).
---@field allow? table Extra globals granted to every mod: values copied, functions proxied.
---@field log? fun(mod: string, line: string) Receives every line a mod prints.
---@field readonly? string[] Components and resources every mod may read but none may write, add, remove, set, clear or despawn an entity holding (at most 64, each registered already).

---Creates the mod manager of a world (one per world). See docs/modding.md.
---@param world kiln.World
---@param opts? kiln.ModsOptions
---@return kiln.Mods
function kiln.mods(world, opts) end

-- ---------------------------------------------------------------------------------------
-- kiln.World
-- ---------------------------------------------------------------------------------------

---A kiln world. Methods raise "attempt to use a closed world" after `close`.
---@class kiln.World
local World = {}

---Destroys a world Lua owns, or detaches Lua from a host's world. Idempotent. Raises
---inside a query loop or a system.
function World:close() end

---Defines a component from a C-style schema ("float x, y; char tag[16];"); nil or "" makes
---a tag, "lua" a script-only component holding any Lua value. Returns its id; the same
---name with the same schema returns the same id, another schema raises.
---@param name string
---@param schema? string
---@return integer id
function World:component(name, schema) end

---Spawns an entity with the components named in `init` (field tables, `true` for tags,
---any value for script-only components). Inside loops and systems the handle is reserved
---and becomes alive when the loop or stage ends.
---@param init? table<string, kiln.value>
---@return entity
function World:spawn(init) end

---Despawns a live entity (raises when it is not alive). Deferred inside loops and systems.
---@param e entity
function World:despawn(e) end

---True for a live entity; false for anything else. Never raises.
---@param e any
---@return boolean
function World:is_alive(e) end

---The number of live entities.
---@return integer
function World:count() end

---Every live entity, by archetype then row.
---@return entity[]
function World:entities() end

---Adds a component, or replaces its value. `value`: a table of fields (missing ones
---zero), `true` or nothing for a tag, any value for a script-only component. Raises when
---`e` is not alive; deferred inside loops and systems.
---@param e entity
---@param name kiln.component
---@param value? kiln.value
function World:add(e, name, value) end

---Removes a component; returns whether it was there (now, when deferred). Raises when `e`
---is not alive.
---@param e entity
---@param name kiln.component
---@return boolean removed
function World:remove(e, name) end

---True when `e` is alive and has the component.
---@param e entity
---@param name kiln.component
---@return boolean
function World:has(e, name) end

---A new table copying the component's fields (`true` for a tag, the stored value for a
---script-only component), or nil when `e` lacks it. Raises when `e` is not alive. With
---`into`, the fields are written into that table (nested tables refilled in place) and it is
---returned: a table reused call after call makes no garbage.
---@param e entity
---@param name kiln.component
---@param into? table
---@return kiln.value|nil
function World:get(e, name, into) end

---A function reading one field of any entity: `get(e)` returns the field's value, nil when
---`e` lacks the component, and raises when `e` is not alive or a running system did not
---declare the component. Reading a number makes no garbage.
---@param name kiln.component
---@param field string
---@return fun(e: entity): any
function World:getter(name, field) end

---Writes the given fields of an existing component in place, keeping the others (the new
---value for a script-only component). Immediate, even inside loops and systems.
---@param e entity
---@param name kiln.component
---@param fields kiln.value
function World:set(e, name, fields) end

---The current world tick (starts at 1).
---@return integer
function World:tick() end

---Advances the world tick; returns the new tick. Raises at 2^53 - 1, the last tick a save holds.
---@return integer
function World:advance_tick() end

---The tick at which `e`'s component was last written, or 0 when it is absent. Raises when
---`e` is not alive. Exact for the last 32,768 ticks; an older write reads as a later tick.
---@param e entity
---@param name kiln.component
---@return integer
function World:changed_tick(e, name) end

---@class kiln.QueryDesc
---@field [integer] kiln.component Required terms (1 to 16).
---@field without? kiln.component[] Archetypes with any of these are excluded.
---@field optional? kiln.component[] Terms that may be absent (their view is nil then).

---Creates a cached query. Views come in the order: required terms, then optional terms.
---@param desc kiln.QueryDesc
---@return kiln.Query
function World:query(desc) end

---@class kiln.SystemDesc
---@field name string Unique, 1 to 63 bytes.
---@field reads? kiln.component[] Components and resources read (at most 32).
---@field writes? kiln.component[] Components and resources written; writing implies reading (at most 32).
---@field exclusive? boolean Runs alone with the world not deferred; may touch everything.
---@field before? string[] Systems this one must precede (at most 8).
---@field after? string[] Systems this one must follow (at most 8).
---@field run? fun(world: kiln.World, dt: number) Give either `run`, or `query` and `each`.
---@field query? kiln.QueryDesc The query of an each-system; its terms count as reads unless declared.
---@field each? fun(e: entity, ...: any) Called as each(e, view1, view2, ..., dt) for every entity of `query`.

---Adds a Lua system to the world's schedule, beside C systems. Declared access is enforced.
---@param desc kiln.SystemDesc
function World:system(desc) end

---@class kiln.Failure
---@field system string The failing system's name.
---@field message string The error message.
---@field traceback string "stack traceback: ..."
---@field disabled boolean True when this failure disabled the system (max_failures).

---Runs one frame of the schedule (tick, events, every stage). Returns true, or false and
---one entry per failed Lua system. A failing system's structural changes are dropped; its
---in-place writes stay.
---@param dt? number Default 0.
---@return boolean ok
---@return kiln.Failure[]|nil failures
function World:progress(dt) end

---@class kiln.SystemInfo
---@field name string
---@field stage integer
---@field kind "lua"|"c"
---@field enabled boolean
---@field exclusive boolean
---@field runs integer
---@field last_ms number Duration of the last run.
---@field avg_ms number Average duration.

---Every system (Lua and C) in declaration order, with stage and timings.
---@return kiln.SystemInfo[]
function World:systems() end

---Enables (default) or disables a system by name; raises for an unknown name. Enabling
---resets the system's count of consecutive failures.
---@param name string
---@param on? boolean
function World:enable(name, on) end

---Takes a system (Lua or C) out of the schedule; during a frame, at the frame's end. The
---name is free again at once. Raises for a name no system has.
---@param name string
function World:remove_system(name) end

---The failures recorded since the last `progress` or `failures` call (and clears them):
---how a host that runs frames with `kiln_schedule_run` reads them.
---@return kiln.Failure[]
function World:failures() end

---How many queued changes the world dropped as they landed, and the last one's message
---(nil when none); on a mod's view, its mod's only.
---@return integer count
---@return string|nil message
function World:dropped() end

---Disables a Lua system after `n` consecutive failures (0: never).
---@param n integer
function World:max_failures(n) end

---The instruction budget of one Lua system run (0: none); sets it when n is given. A system
---past it fails like a system that raised.
---@param n? integer
---@return integer
function World:instructions(n) end

---Makes `parent` the parent of `child` (sets Parent); nil removes the link. Raises for dead
---entities, a parent the world never handed out, self links and cycles. Deferred inside
---loops and systems, where an entity spawned earlier in the same loop or system counts as alive.
---@param child entity
---@param parent entity|nil
function World:set_parent(child, parent) end

---The children of `e`, ordered by handle. Raises when `e` is not alive.
---@param e entity
---@return entity[]
function World:children(e) end

---Despawns `e` and all its descendants. In a system it needs Parent in reads or writes.
---@param e entity
function World:despawn_recursive(e) end

---Defines an event type from a schema (not "lua"); returns its type id.
---@param name string
---@param schema? string
---@return integer
function World:event(name, schema) end

---Emits an event (nil fields for an event without fields). Inside a system it lands at the
---end of the system's stage.
---@param name string
---@param fields? table<string, any>
function World:emit(name, fields) end

---Iterates the readable events of a type: last frame's, then this frame's, in emit order.
---@param name string
---@return fun(): table<string, any>|nil
function World:events(name) end

---Gets (one argument) or sets (two; nil removes) a resource. A defined component name holds
---that layout (visible to C, fields merged on set, access-checked); any other name holds a
---Lua value.
---@param name string
---@param value? any
---@return any
function World:resource(name, value) end

---Saves the world (entities, components, Parent links, resources, tick, schemas by name)
---to path, or returns the data when no path is given. "lua" values must be plain data.
---@param path? string
---@param options? {format?: "binary"|"json"}
---@return string?
function World:save(path, options) end

---Loads saved data or a file into the world and returns the map from saved handles to new
---ones; raises with the reason (and where) on any error, the world untouched.
---@param path_or_data string
---@param options? {skip_unknown?: boolean}
---@return table<entity, entity>
function World:load(path_or_data, options) end

---A 64-bit XXH3 hash of the world's content, independent of storage order.
---@return integer
function World:hash() end

---`world:hash()` without the free slots: the live content alone, so spawning and despawning
---an entity leaves it as it was. "hex" gives 16 lowercase hex digits.
---@param format? "hex"
---@return integer|string
function World:content_hash(format) end

---Copies the whole world in memory (no "lua"-valued component values allowed).
---@return kiln.Snapshot
function World:snapshot() end

---Puts the world back exactly as the snapshot holds it (same handles, values, ticks).
---@param snapshot kiln.Snapshot
function World:restore(snapshot) end

---Gets (one argument) or sets (two; nil removes) the entity's unique name.
---@param e entity
---@param name? string
---@return string?
function World:name(e, name) end

---The live entity with this name, or nil (constant time).
---@param name string
---@return entity?
function World:lookup(name) end

---A copy of `e` (with `tree`, of its descendants too) under the same parent.
---@param e entity
---@param options? {tree?: boolean}
---@return entity
function World:clone(e, options) end

---Gets (no argument) or sets the world's random seed.
---@param n? integer
---@return integer?
function World:seed(n) end

---As math.random, from the world's seeded streams (per system inside a Lua system).
---@param m? integer
---@param n? integer
---@return number
function World:random(m, n) end

---A reusable tree: {components = {Name = fields}, children = {def, ...}}, checked now; or
---JSON text of that shape, or a path to a JSON file.
---@param def table|string
---@return kiln.Prefab
function World:prefab(def) end

---Spawns a scene (JSON text or a path) with named prefabs, its roots under parent.
---@param scene string
---@param options? {prefabs?: table<string, kiln.Prefab>, parent?: entity}
---@return kiln.Instance
function World:instantiate(scene, options) end

---The scene (JSON text) of roots and their descendants, or of every parentless entity.
---@param roots? entity[]
---@param options? {name?: string}
---@return string
function World:export(roots, options) end

---@class kiln.Instance
---@field roots entity[]
---@field spawned entity[]
---@field name string
---@field properties table
local Instance = {}

---The entity the scene named name, or nil.
---@param name string
---@return entity|nil
function Instance:entity(name) end

---Despawns the entities the instance spawned that are still alive.
function Instance:despawn() end

---@class kiln.Prefab
local Prefab = {}

---Spawns the tree: the root, or a list of `count` roots.
---@param count? integer
---@return entity|entity[]
function Prefab:spawn(count) end

---@class kiln.Snapshot
local Snapshot = {}

---Bytes the snapshot holds.
---@return integer
function Snapshot:bytes() end

---@class kiln.FieldInfo
---@field name string
---@field type string "float", "vec3", "char", ...
---@field count integer Array length (1 for a plain field).

---@class kiln.ComponentInfo
---@field name string
---@field id integer
---@field size integer Bytes.
---@field kind "data"|"tag"|"lua"
---@field owner? true An owner mark (a mod's tag, kiln.mod.NAME): copies leave it off.
---@field schema string The normalised schema, e.g. "float x; float y;".
---@field fields kiln.FieldInfo[]

---Every component of the world (no argument), or the names of `e`'s components (nil when
---`e` is not alive).
---@param e? entity
---@return kiln.ComponentInfo[]|string[]|nil
function World:components(e) end

---Describes a component, or nil for an unknown name or id.
---@param name kiln.component
---@return kiln.ComponentInfo|nil
function World:component_info(name) end

---"component Position (8 bytes): float x; float y;"; raises for an unknown name or id.
---@param name kiln.component
---@return string
function World:schema(name) end

---A multi-line description of an entity and its components.
---@param e entity
---@return string
function World:inspect(e) end

---@class kiln.Stats
---@field entities integer
---@field archetypes integer
---@field components integer
---@field queries integer
---@field bytes integer Bytes allocated through the world's allocator.
---@field tick integer

---World statistics.
---@return kiln.Stats
function World:stats() end

---Gives back the room of archetypes holding under a quarter of what they have room for; returns the bytes freed (0 inside a frame or a query loop).
---@return integer
function World:trim() end

-- ---------------------------------------------------------------------------------------
-- kiln.Query
-- ---------------------------------------------------------------------------------------

---A cached query from `world:query`.
---@class kiln.Query
local Query = {}

---Iterates matching entities: `for e, a, b in q:each() do ... end`. Views read and write
---the columns; the world is deferred while the loop runs.
---@return fun(...): entity, ... iterator
---@return any state
---@return nil control
---@return any closing
function Query:each() end

---The bulk path: calls fn(n, entities, term1, term2, ..., ...) once per chunk (at most 512
---rows of one archetype); each data term is a table of field arrays written back afterwards.
---Only indices 1..n are valid.
---@param fn fun(n: integer, entities: entity[], ...: kiln.BulkTerm|any)
---@param ... any Extra arguments passed to fn after the terms.
function Query:bulk(fn, ...) end

---Like `q:each()`, with FFI views for every field type under LuaJIT (arrays from 0, `char`
---arrays and 64-bit integers as cdata); raises where a term cannot be mapped. Under Lua 5.4,
---in mods and under budgets it is `q:each()`.
---@return fun(...): entity, ... iterator
---@return any state
---@return nil control
---@return any closing
function Query:each_ffi() end

---Calls fn(n, entities, col1, ..., ...) once per chunk with FFI pointers to the columns, rows
---0 to n-1, under LuaJIT (elsewhere: once per row, n = 1).
---@param fn fun(n: integer, entities: any, ...: any)
---@param ... any Extra arguments passed to fn after the columns.
function Query:bulk_ffi(fn, ...) end

---The matched entities in iteration order, at most `limit` of them (default all). Reads no
---component values and stamps nothing changed.
---@param limit? integer
---@return entity[]
function Query:entities(limit) end

---The number of entities the query matches now.
---@return integer
function Query:count() end

---The term names: required terms, then optional terms.
---@return string[]
function Query:terms() end

---The matched entities as a text table (default limit 20 rows).
---@param world kiln.World
---@param limit? integer
---@return string
function Query:format(world, limit) end

-- ---------------------------------------------------------------------------------------
-- kiln.Commands
-- ---------------------------------------------------------------------------------------

---A command buffer: records changes now and applies them later, in order, to any world.
---@class kiln.Commands
local Commands = {}

---Records a spawn; returns a placeholder for the new entity.
---@param init? table<string, kiln.value>
---@return kiln.placeholder
function Commands:spawn(init) end

---Records an add (or replace).
---@param e entity|kiln.placeholder
---@param name string
---@param value? kiln.value
function Commands:add(e, name, value) end

---Records a set of some fields.
---@param e entity|kiln.placeholder
---@param name string
---@param fields? kiln.value
function Commands:set(e, name, fields) end

---Records a remove.
---@param e entity|kiln.placeholder
---@param name string
function Commands:remove(e, name) end

---Records a despawn (skipped when the entity has died by the time of the apply).
---@param e entity|kiln.placeholder
function Commands:despawn(e) end

---Applies pending records in order. Returns the count, or nil, a message and the number
---applied when a record fails (it and the rest stay queued; a later apply resumes).
---@param world kiln.World
---@return integer|nil applied
---@return string? message
---@return integer? applied_before_error
function Commands:apply(world) end

---Drops every pending record and starts a new batch.
function Commands:clear() end

---The number of pending records.
---@return integer
function Commands:count() end

---The entity a placeholder of the current batch became, or nil before its spawn is applied.
---@param placeholder kiln.placeholder
---@return entity|nil
function Commands:resolved(placeholder) end

-- ---------------------------------------------------------------------------------------
-- kiln.Session (the REPL)
-- ---------------------------------------------------------------------------------------

---A REPL session: lines in, text out, no I/O of its own.
---@class kiln.Session
---@field env table The environment statements run in.
---@field watches string[] Expressions printed after every step.
---@field remote? boolean
---@field dt number
local Session = {}

---@alias kiln.SessionStatus "ok"|"more"|"error"|"quit"|"run"|"pause"

---Feeds one line: a statement, an expression (its value is printed) or a ":" command.
---@param line string
---@return kiln.SessionStatus status
---@return string text
function Session:feed(line) end

---Drops a statement being continued.
function Session:reset() end

---Completion candidates that replace the last word of `line`.
---@param line string
---@return string[]
function Session:complete(line) end

---Runs the schedule n frames and reports failures, watches, tick and entity count.
---@param n integer
---@return kiln.SessionStatus status
---@return string text
function Session:step(n) end

---Runs a ":" command (":help", ":step 3", ...).
---@param line string
---@return kiln.SessionStatus status
---@return string text
function Session:command(line) end

---Runs fn with `print` captured; returns whether it succeeded and the text to show.
---@param fn function
---@param ... any
---@return boolean ok
---@return string text
function Session:call(fn, ...) end

---Picks the session's world, as the `kiln` command does after a script: a `world` global
---holding an open world, else `value` when it is a world, else the one global holding a
---world, else a new one; sets `world` and returns a line saying which.
---@param value? any
---@return string text
function Session:open_world(value) end

-- ---------------------------------------------------------------------------------------
-- kiln.Mods
-- ---------------------------------------------------------------------------------------

---What `mods:list()` shows of a mod.
---@class kiln.ModInfo
---@field name string
---@field version string
---@field path string The folder or file it was loaded from.
---@field state "running"|"disabled"
---@field memory integer Bytes its Lua state uses now.
---@field memory_peak integer
---@field systems string[] Its systems in the schedule.
---@field components string[] Components and event types it declared.
---@field entities integer Live entities it spawned.
---@field world_bytes integer Bytes it holds in the world, against its `world_memory`.
---@field query_bytes integer Of those, what its live queries hold (kiln_query_memory).
---@field queries integer Live queries it made.
---@field failures integer System runs of it that failed.
---@field depends string[]
---@field error? string Its last error.

---A mod manager: each mod in a sandboxed Lua state of its own, sharing the world.
---@class kiln.Mods
local Mods = {}

---Loads a mod folder (with manifest.lua) or a NAME.lua file.
---@param path string
---@return kiln.ModInfo|nil info
---@return string? message
function Mods:load(path) end

---Loads every mod of a folder in dependency order.
---@param dir string
---@return string[]|nil loaded Names, in load order; nil for a folder it cannot read.
---@return table<string, string>|string failures Messages by mod name, or why the folder was not read.
function Mods:load_dir(dir) end

---Reloads a mod in place (and the mods depending on it); the old version runs on if the new fails.
---@param name string
---@return kiln.ModInfo|nil info
---@return string? message
function Mods:reload(name) end

---Unloads a mod: its systems leave, its entities and components go unless opts.keep.
---@param name string
---@param opts? {keep: boolean}
---@return true|nil ok
---@return string? message
function Mods:unload(name, opts) end

---@return kiln.ModInfo[]
function Mods:list() end

---Reloads the mods whose files changed; releases disabled mods' states.
---@return string[] reloaded
---@return table<string, string> failures
function Mods:poll() end

---The last lines a mod printed.
---@param name string
---@param n? integer
---@return string[]|nil lines nil for a name no loaded mod has.
---@return string? message
function Mods:log(name, n) end

---Closes every mod's state (their systems leave; entities and data stay).
function Mods:close() end

---Makes more components and resources read-only to every mod, as opts.readonly, from now on
---(between frames; each the host's, registered already). Nothing changes when one fails:
---nil and a message naming the loaded mod's system that lists one in writes.
---@param name string
---@param ... string
---@return true|nil ok
---@return string? message
function Mods:readonly(name, ...) end

return kiln
