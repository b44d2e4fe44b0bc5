-- ffi.lua: under LuaJIT, q:each(), Lua each-systems, q:each_ffi() and q:bulk_ffi() hand out FFI
-- pointers into the columns as views (C half: lua/src/jit_views.c). Elsewhere: the table path.
local kiln, World, Query, layer = ...
local views = layer.views
-- What this file calls at run time, held at load: a script that later replaces a global, a
-- library function or the string metatable's __index (string methods) changes nothing here.
local assert, error, getmetatable, ipairs, load, pcall, rawget, select, setmetatable, tonumber, tostring, type =
  assert, error, getmetatable, ipairs, load, pcall, rawget, select, setmetatable, tonumber, tostring, type
local format, rep, sub, find, gsub, match, gmatch = string.format, string.rep, string.sub, string.find, string.gsub,
  string.match, string.gmatch
local concat, sort, unpack = table.concat, table.sort, table.unpack or unpack
local LUA51 = _VERSION == "Lua 5.1"
-- Where the table path runs: each row as a chunk of one, its views the tables of q:each at [0]
-- (a tag term true and an absent optional term nil, as the FFI path hands them).
local function rows_source(count)
  local vs, cs, set, args = {}, {}, {}, {}
  for t = 1, count do
    vs[t], cs[t] = "v" .. t, "C" .. t
    set[t] = format("    C%d[0] = v%d\n", t, t)
    args[t] = format("v%d == true or (v%d ~= nil and C%d or nil)", t, t, t) -- a tag is true, as in the FFI path
  end
  return format("local unpack = ...\nreturn function(q, fn, extra, n_extra)\n  local E = {}\n" ..
    "  local %s = %s\n  for e, %s in q:each() do\n    E[0] = e\n%s    fn(1, E, %s, unpack(extra, 1, n_extra))\n  end\nend\n",
    concat(cs, ", "), rep("{}, ", count - 1) .. "{}", concat(vs, ", "), concat(set), concat(args, ", "))
end

local chunks = {} -- generated source -> its compiled chunk, shared by the queries of one shape
local function compiled(src, ...)
  local fn = chunks[src]
  if not fn then
    fn = assert(load(src, "=lua/kiln/ffi.lua(generated)"))
    chunks[src] = fn
  end
  return fn(...)
end

local term_counts = setmetatable({}, {__mode = "k"}) -- Query -> its number of terms

-- q:bulk_ffi where FFI views do not exist or are off: fn(1, entities, views..., ...) per row.
local function bulk_rows(q, fn, ...)
  local count = term_counts[q]
  if not count then
    count = #q:terms()
    term_counts[q] = count
  end
  local rows = compiled(rows_source(count), unpack)
  return rows(q, fn, {...}, select("#", ...))
end

-- Raises unless q is a kiln.Query, naming the method fname.
local is_query = layer.is_query
local function check_query(q, fname)
  if is_query(q) then return end
  local mt = getmetatable(q)
  local name = type(mt) == "table" and rawget(mt, "__name")
  error(format("calling '%s' on bad self (kiln.Query expected, got %s)", fname,
                      type(name) == "string" and name or type(q)), 3)
end

-- Raises err again for the script. A C function that raised for a call made here named this
-- file's line (luaL_error names its caller's line): that position is replaced by the line of
-- the function level levels above raise's caller (counted as error() counts them); any other
-- error is raised as it is. With fname, a leading "query:each: " is renamed to fname's (the
-- table path runs q:each for q:each_ffi and q:bulk_ffi).
local function raise(err, level, fname)
  local own
  if type(err) == "string" then
    local msg, n = gsub(err, "^lua/kiln/ffi%.lua[^:]*:%d+: ", "", 1)
    if n > 0 then err, own = msg, true end
    if fname and find(err, "^query:each: ") then err = fname .. sub(err, 11) end
  end
  error(err, own and level + 1 or 0)
end

-- The results of pcall(fn, ...) for a method called as a tail call: what fn returned, or its
-- error raised again (raise) at the script's line, named after fname.
local function renamed(fname, ok, ...)
  if ok then return ... end
  raise((...), 2, fname)
end

local function check_fn(fn)
  if type(fn) ~= "function" then
    error(format("bad argument #1 to 'query:bulk_ffi' (function expected, got %s)", type(fn)), 3)
  end
end

-- q:each(fn) visited nothing and said nothing: the loops take no argument (as the C q:each).
local function no_argument(fname, extra)
  error(format("bad argument #1 to '%s' (no argument expected, got %s: a function run per row is an " ..
    "each system's, or q:bulk(fn)'s)", fname, type(extra)), 3)
end

local each = Query.each
if not views then -- Lua 5.4, or a state without the ffi library (a mod's): table views
  function Query:each_ffi(extra)
    check_query(self, "query:each_ffi")
    if extra ~= nil then no_argument("query:each_ffi", extra) end
    -- LuaJIT (a mod's state): a tail call, so q:each notes the caller's frame as the one its
    -- loop runs in (jit_methods.c); its errors then name q:each
    if LUA51 then return each(self) end
    return renamed("query:each_ffi", pcall(each, self))
  end
  function Query:bulk_ffi(fn, ...)
    check_query(self, "query:bulk_ffi")
    check_fn(fn)
    return renamed("query:bulk_ffi", pcall(bulk_rows, self, fn, ...))
  end
  return
end
local ffi = views.ffi
local cast, typeof, cdef, metatype, offsetof, sizeof = ffi.cast, ffi.typeof, ffi.cdef, ffi.metatype, ffi.offsetof, ffi.sizeof
local next_chunk, begin, alive, each_rows = views.next, views.begin, views.alive, views.each_rows

-- Declares struct <prefix>_<n> { body } under the first free name (names are per Lua state: a
-- module loaded again finds its earlier ones taken); returns the name, or nil and the error.
-- Pointer types are named too: ffi.typeof("$ *", ct) can hand out another struct's pointer
-- type (seen under busted).
local shared = views.shared -- one per Lua state, whatever loads of kiln it sees
shared.declared = shared.declared or {n = 0}
local declared = shared.declared
local function declare(prefix, body)
  local name, ok, err
  repeat
    declared.n = declared.n + 1
    name = format("%s_%d", prefix, declared.n)
    ok, err = pcall(cdef, format("struct %s { %s };", name, body))
  until ok or not find(tostring(err), "redefine", 1, true)
  if not ok then return nil, tostring(err) end
  return name
end

-- The head of a kiln_iter (kiln.h) as far as q:bulk_ffi reads it, and a loop's row state
-- (jit_views.c's ffi_rows), which q:each's step reads and advances; both checked against C.
local LAYOUT = views.layout
local ITER, ROWS = shared.ITER, shared.ROWS
if not ITER then
  local iter_name = assert(declare("kiln_iter", format([[int32_t count; int32_t term_count;
    const uint64_t *entities; void *columns[%d]; uint16_t *ticks[%d]; uint64_t tick;
    const uint64_t *tick_base;]], LAYOUT.max_terms, LAYOUT.max_terms)))
  local iter = typeof("struct " .. iter_name)
  for _, field in ipairs({"count", "entities", "columns", "ticks", "tick", "tick_base"}) do
    assert(offsetof(iter, field) == LAYOUT[field], "lua/kiln/ffi.lua: kiln_iter's layout changed: " .. field)
  end
  ITER = typeof("struct " .. iter_name .. " *")
  -- entities as int64_t: handles stay below 2^53, and a signed load converts in one step
  local rows_name = assert(declare("kiln_rows", format([[int64_t i; int32_t n; uint32_t tick;
    const int64_t *entities; void *columns[%d]; uint16_t *ticks[%d];]], LAYOUT.max_terms, LAYOUT.max_terms)))
  local rows = typeof("struct " .. rows_name)
  for _, field in ipairs({"i", "n", "tick", "entities", "columns", "ticks"}) do
    assert(offsetof(rows, field) == LAYOUT["rows_" .. field], "lua/kiln/ffi.lua: ffi_rows changed: " .. field)
  end
  assert(sizeof(rows) == LAYOUT.rows_size, "lua/kiln/ffi.lua: ffi_rows changed its size")
  ROWS = typeof("struct " .. rows_name .. " *")
  shared.ITER, shared.ROWS = ITER, ROWS
end
local C_KEYWORDS = {}
for w in gmatch([[auto break case char const continue default do double else enum extern float for
  goto if inline int long register restrict return short signed sizeof static struct switch
  typedef union unsigned void volatile while bool _Bool _Complex _Imaginary]], "%S+") do
  C_KEYWORDS[w] = true
end

-- Field types whose FFI value reads and writes as the table view's does (a number, a boolean,
-- or a struct of x, y[, z[, w]] floats changed in place). q:each hands out FFI views only when
-- every field is one of these; 64-bit integers (cdata), arrays (0-based), char arrays (not
-- strings) and mat4 keep its table views.
local SAME_AS_TABLE = {
  bool = true, int8_t = true, int16_t = true, int32_t = true, uint8_t = true, uint16_t = true,
  uint32_t = true, float = true, double = true,
  ["struct { float x, y; }"] = true, ["struct { float x, y, z; }"] = true, ["struct { float x, y, z, w; }"] = true,
}

-- Raises, naming the method called (q:each_ffi or q:bulk_ffi) and a term that cannot be mapped,
-- at the level of that method's caller.
local function refuse(fname, name, why)
  local instead = fname == "query:bulk_ffi" and "q:bulk" or "q:each"
  error(format("%s: %s cannot be mapped to an FFI type: %s (use %s)", fname, name, why, instead), 4)
end

-- shared.running_system: the system running the FFI loop begun last (nil outside systems),
-- which a write to a read-only view names: Lua systems of a state run one at a time.

-- The metatables of a component's view structs: a field the component lacks raises as a
-- table view's does. The read-only struct names its fields const __kiln_ro_<name>, so reading
-- v.x goes through __index (a constant key: compiled code reads the field directly) and a
-- write lands in __newindex, which raises naming the system, as the table path does.
-- Their messages carry no position, as the C view's (luaL_error at a C function's level).
local function view_metas(name, check, fields)
  local function missing(_, key)
    error(format("%s has no field '%s'", name, sub(tostring(key), 1, 64)), 0)
  end
  local renamed, order = {}, {}
  for i, f in ipairs(fields) do
    renamed[f.name] = "__kiln_ro_" .. f.name
    order[i] = f.name
  end
  -- pairs(view) walks the fields, as over a table view
  local function walk(v)
    local i = 0
    return function()
      i = i + 1
      local k = order[i]
      if k ~= nil then return k, v[k] end
    end, v, nil
  end
  local writable = {__index = function(v, k) missing(v, k) end, __newindex = function(v, k) missing(v, k) end,
                    __pairs = walk}
  local read_only = {
    __pairs = walk,
    __index = function(v, k)
      local field = renamed[k]
      if field == nil then missing(v, k) end
      return v[field]
    end,
    __newindex = function(v, k)
      -- a system's read-only term refuses any key first, as the C view does
      if not check and shared.running_system then
        error(format("system '%s' cannot write %s: it is read-only (declared only in reads)", shared.running_system,
                     name), 0)
      end
      if renamed[k] == nil then missing(v, k) end
      if check then
        error(format("%s is read-only in FFI views (a check hook validates its writes; use world:set)", name), 0)
      end
      error(format("%s is read-only here (declare it in writes to change it)", name), 0)
    end,
  }
  return writable, read_only
end

-- The FFI struct of a data term, its fields at the core's offsets and checked against the
-- layout; or nil and why it cannot be mapped. strict (q:each): only fields in SAME_AS_TABLE.
shared.structs = shared.structs or {}
local structs = shared.structs -- component name, check and struct body -> its pointer types
local function struct_of(term, strict)
  if term.kind == "lua" then return nil, "it holds Lua values" end
  local fields = {}
  for i, f in ipairs(term.fields) do fields[i] = f end
  if #fields == 0 then return nil, "it has no reflected fields" end
  sort(fields, function(a, b) return a.offset < b.offset end)
  local parts, names, pos = {}, {}, 0 -- names[k]: the field parts[k] declares
  for _, f in ipairs(fields) do
    if not f.ctype then return nil, format("field '%s' has type %s", f.name, f.type) end
    if not match(f.name, "^[%a_][%w_]*$") or C_KEYWORDS[f.name] then
      return nil, format("field '%s' is not a C name", sub(f.name, 1, 64))
    end
    -- the structs' own names (padding, the read-only struct's fields), which a field so named
    -- would read in place of another
    if match(f.name, "^__kiln_") then
      return nil, format("field '%s' has a name kiln's FFI structs use", sub(f.name, 1, 64))
    end
    if f.offset < pos then return nil, format("field '%s' overlaps another", f.name) end
    if f.offset > pos then parts[#parts + 1] = format("uint8_t __kiln_pad%d[%d];", pos, f.offset - pos) end
    -- as the table path reads them: count 0 or 1 is one value, except a char array
    local array = f.count > 1 or (f.ctype == "char" and f.count > 0)
    if strict and (array or not SAME_AS_TABLE[f.ctype]) then
      return nil, format("field '%s' (%s) reads differently through FFI", f.name, f.type)
    end
    local n = array and f.count or 1
    local dims = array and format("[%d]", f.count) or ""
    if f.ctype == "float[16]" then
      parts[#parts + 1] = format("float %%s%s[16];", dims)
    else
      parts[#parts + 1] = format("%s %%s%s;", f.ctype, dims)
    end
    names[#parts] = f.name
    pos = f.offset + f.elem_size * n
  end
  if term.stride > pos then parts[#parts + 1] = format("uint8_t __kiln_pad%d[%d];", pos, term.stride - pos) end
  -- the body with the fields' names, and with the read-only struct's
  local function body_of(prefix)
    local out = {}
    for k, part in ipairs(parts) do
      out[k] = names[k] and (prefix ~= "" and "const " or "") .. format(part, prefix .. names[k]) or part
    end
    return concat(out, " ")
  end
  local body = body_of("")
  local key = term.name .. (term.check and "\1" or "\0") .. body
  local ct = structs[key]
  if not ct then
    local name, err = declare("kiln_view", body)
    if not name then return nil, err end
    local ro_name, ro_err = declare("kiln_ro", body_of("__kiln_ro_"))
    if not ro_name then return nil, ro_err end
    local struct, ro = typeof("struct " .. name), typeof("struct " .. ro_name)
    local meta, ro_meta = view_metas(term.name, term.check, fields)
    metatype(struct, meta)
    metatype(ro, ro_meta)
    ct = {ptr = typeof("struct " .. name .. " *"), const_ptr = typeof("struct " .. ro_name .. " *")}
    for _, c in ipairs({struct, ro}) do
      if sizeof(c) ~= term.stride then
        return nil, format("its FFI size %d is not its stride %d", sizeof(c), term.stride)
      end
    end
    for _, f in ipairs(fields) do
      if offsetof(struct, f.name) ~= f.offset or offsetof(ro, "__kiln_ro_" .. f.name) ~= f.offset then
        return nil, format("field '%s' lies at %d in C, %d in FFI", f.name, f.offset, offsetof(struct, f.name))
      end
    end
    structs[key] = ct
  end
  return ct
end

-- Loop numbers, which the generic for passes the step as its state (a number: no garbage):
-- slot + count * SLOTS_N. Each query state holds a slot (SLOTS[-slot] is the state, weak: a
-- state is still collected, and a finalizer frees its slot for the next state made); count
-- is the slot's loops begun, never reused, also by a later state of the slot (COUNTS[slot] is
-- kept), so a number never names two loops. A slot that has had MAX_COUNT loops (the numbers
-- stay below 2^53, exact as doubles) is given up: its state takes another. SLOTS's keys are
-- negative so that it has no array part: the step's lookup is then a hash load, which a loop
-- body's array stores cannot invalidate, so compiled loops make it once, not per row. One set
-- per Lua state.
local SLOTS_N, MAX_COUNT = 2 ^ 20, 2 ^ 33 - 1
shared.slots = shared.slots or {
  states = setmetatable({}, {__mode = "v"}), counts = {}, free = {}, top = 0, -- slot 0 unused
}
local slots = shared.slots
local SLOTS, COUNTS, FREE = slots.states, slots.counts, slots.free

-- A free slot for the state s (SLOTS[-slot] = s), or nil when all are taken.
local function take_slot(s)
  while #FREE > 0 do
    local slot = FREE[#FREE]
    FREE[#FREE] = nil
    if SLOTS[-slot] == nil and COUNTS[slot] < MAX_COUNT then
      SLOTS[-slot] = s
      return slot
    end
  end
  if slots.top < SLOTS_N - 1 then
    slots.top = slots.top + 1
    COUNTS[slots.top], SLOTS[-slots.top] = COUNTS[slots.top] or 0, s -- (a count kept: a sweep's)
    return slots.top
  end
  -- Every slot was handed out. A stop (a budget's error) between a take and hold_slot's box
  -- leaves a slot no finalizer frees; once its state is collected, a sweep from where the
  -- last one ended finds it (a slot also in FREE is skipped there while it is taken).
  for _ = 1, SLOTS_N - 1 do
    local slot = (slots.sweep or 0) % (SLOTS_N - 1) + 1
    slots.sweep = slot
    local count = COUNTS[slot] or 0 -- (0: never counted)
    if SLOTS[-slot] == nil and count < MAX_COUNT then
      COUNTS[slot], SLOTS[-slot] = count, s
      return slot
    end
  end
  return nil
end

-- Gives the new state s its slot: s.slot is a box whose [1] is the slot (false while it has
-- none), which a finalizer frees when s is collected (it holds the box, not s).
local function hold_slot(s)
  local box = {false}
  s.slot = box
  s.slot_guard = ffi.gc(ffi.new("uint8_t[1]"), function()
    if box[1] then FREE[#FREE + 1] = box[1] end
  end)
  box[1] = take_slot(s) or false
end

-- The number of the loop s begins now (its slot's next count), or nil when s has no slot and
-- none is free (its loops then run the table path).
local function next_loop(s)
  local box = s.slot
  local slot = box[1]
  if not slot or COUNTS[slot] >= MAX_COUNT then
    if slot then SLOTS[-slot] = nil end -- given up: never freed again
    slot = take_slot(s)
    box[1] = slot or false
    if not slot then return nil end
  end
  local count = COUNTS[slot] + 1
  COUNTS[slot] = count
  return slot + count * SLOTS_N
end

-- The step of a loop, kinds[t] "d" (a data with-term), "o" (an optional data term) or "t" (a
-- tag with-term). Each loop has its own state: its loop number, the generic for's state. The
-- step finds the query state S by the number's slot and hands out rows only while the number
-- is S's current loop (S.loop, 0 once it ended: C empties it, end_rows) and the step is the
-- one that loop was begun with (S.step): a step kept from an earlier loop, or a coroutine
-- resumed inside a newer one, finds no more rows, and never hands out a newer loop's rows
-- with its own view types (mutable where that loop's are const). S.r is the rows of S's loop
-- (ROWS, filled by next_chunk a chunk at a time). One prototype per shape and kind (plain,
-- bare, debug); one closure of it per set of view types (P<t>, upvalues the traces take as
-- constants), shared by every query state of them: a loop that runs several queries of one
-- shape and access meets one step, which its trace is specialized to (a step per query state
-- made such a loop meet one closure per query: 25x slower with four queries), and it finds
-- S, S.loop and S.step once per trace, not per row. Per row: the row counter, a tick stored
-- for each term the loop stamps (r.ticks[t] not NULL), and the entity (a load LuaJIT keeps
-- even when the loop ignores it: it is the for's control value), or with bare (a loop that
-- never reads it, loop_sites.lua) true in its place. In the debug form each view goes
-- through wrap(S, t, pointer).
local function step_source(kinds, debug, bare)
  local b, types = {}, {}
  for t, k in ipairs(kinds) do if k ~= "t" then types[#types + 1] = "P" .. t end end
  b[1] = format("local SLOTS, SLOTS_N, type, next_chunk, cast, tonumber, wrap%s = ...\n" ..
                "local function row(S, r, i)\n  local tick = S.tick\n",
                #types > 0 and ", " .. concat(types, ", ") or "")
  for t, k in ipairs(kinds) do
    if k ~= "t" then b[#b + 1] = format("  local T%d = r.ticks[%d]\n  if T%d ~= nil then T%d[i] = tick end\n", t, t - 1, t, t) end
  end
  local results = {bare and "true" or "tonumber(r.entities[i])"}
  for t, k in ipairs(kinds) do
    if k == "t" then
      results[#results + 1] = "true"
    else
      local view = debug and format("wrap(S, %d, cast(P%d, c%d) + i)", t, t, t) or format("cast(P%d, c%d) + i", t, t)
      b[#b + 1] = format("  local c%d = r.columns[%d]\n", t, t - 1)
      results[#results + 1] = k == "d" and view or format("(c%d ~= nil and %s or nil)", t, view)
    end
  end
  b[#b + 1] = "  return " .. concat(results, ", ") .. "\nend\n"
  -- a chunk's first row: no row value is live across next_chunk (compiled code would box it)
  -- (loop is handed to first so that it stays live in the step's frame: dead there, the exit
  -- snapshots of compiled code refer to the last row's views instead, which keeps their
  -- pointers alive across rows, a few register moves per row)
  b[#b + 1] = "local function first(S, r, loop)\n  if loop ~= S.loop then return nil end\n"
  b[#b + 1] = "  if not next_chunk(S.q, S.rows) then S.n = 0 return nil end\n"
  b[#b + 1] = "  S.n, S.tick = r.n, r.tick\n  r.i = 0\n  return row(S, r, 0)\nend\n"
  b[#b + 1] = "local function step(loop)\n  if type(loop) ~= \"number\" then return nil end\n"
  b[#b + 1] = "  local S = SLOTS[-(loop % SLOTS_N)]\n"
  b[#b + 1] = "  if not S or S.loop ~= loop or S.step ~= step then return nil end\n"
  b[#b + 1] = "  local r = S.r\n  local i = r.i + 1\n  if i >= S.n then return first(S, r, loop) end\n"
  b[#b + 1] = "  r.i = i\n  return row(S, r, i)\nend\nreturn step\n"
  return concat(b)
end

local steps = setmetatable({}, {__mode = "v"}) -- shape, kind and view types -> the step

-- Debug views: a table per row that checks, on every use, that its loop still runs.
local PTR, LOOP, TERM = {}, {}, {}

local function view_dead(v)
  return not alive(v[TERM].q, v[LOOP])
end
-- The pointer's own read and write, run protected: its errors (an unknown field, a value FFI
-- cannot convert, a write to a read-only term, whose pointer is const and names the system or
-- the check hook) are raised again at the script's line, as without debug mode.
local function get(ptr, k) return ptr[k] end
local function put(ptr, k, value) ptr[k] = value end
local debug_meta = {
  __index = function(v, k)
    if view_dead(v) then error(format("a %s view was used after its loop ended", v[TERM].name), 0) end
    local ok, value = pcall(get, v[PTR], k)
    if not ok then raise(value, 2) end
    return value
  end,
  __newindex = function(v, k, value)
    if view_dead(v) then error(format("a %s view was used after its loop ended", v[TERM].name), 0) end
    local ok, err = pcall(put, v[PTR], k, value)
    if not ok then raise(err, 2) end
  end,
  __tostring = function(v) return "kiln FFI view of " .. v[TERM].name end,
}

-- A debug view of term t of the row at pointer ptr, for the loop of state s running now.
local function wrap(s, t, ptr)
  return setmetatable({[PTR] = ptr, [LOOP] = s.gen, [TERM] = s.terms[t]}, debug_meta)
end

-- The state of q's FFI loops, or nil and why its terms cannot be mapped (strict: as q:each
-- requires, see SAME_AS_TABLE). Kept with the query (views.state) as {full, strict}. Its
-- loop, gen, n, tick and step are those of its loop running now (set when it begins: loop
-- its number, gen C's number of it, views.alive's; loop and n 0 once it ended): keys that
-- exist from the start, which C sets without allocating.
local function make_state(q, strict)
  local terms = views.terms(q)
  local rows, address = views.rows()
  local s = {kinds = {}, ptr_types = {}, const_types = {}, mutable_types = {}, names = {}, canwrite = {}, check = {},
             writable = {}, it = cast(ITER, views.iter(q)), rows = rows, r = cast(ROWS, address), q = q, terms = {},
             step_for = {}, bare_step_for = {}, loop = 0, gen = 0, n = 0, tick = 0, step = false, mask = 0}
  for t, term in ipairs(terms) do
    s.names[t] = term.name
    if term.kind == "tag" then
      if term.optional then return nil, term.name, "an optional tag has no column to point into" end
      s.kinds[t] = "t"
    else
      if strict and term.check then return nil, term.name, "a check hook validates its writes" end
      local ct, why = struct_of(term, strict)
      if not ct then return nil, term.name, why end
      s.kinds[t] = term.optional and "o" or "d"
      s.const_types[t] = ct.const_ptr
      s.mutable_types[t] = ct.ptr
      s.check[t] = term.check
    end
    s.terms[t] = {name = term.name, t = t, s = s, q = q}
  end
  hold_slot(s)
  return s
end

-- The step of s for its current view types (choose_types, which sets s.mask), plain, bare (no
-- entity) or debug: the shared one (steps), found once per state and kind and then cached in
-- s by mask, so beginning a loop makes no garbage.
local function step_of(s, debug, bare)
  bare = bare and not debug
  local cache = bare and s.bare_step_for or s.step_for
  local mask = debug and -1 - s.mask or s.mask
  local step = cache[mask]
  if step then return step end
  local key, types = {debug and "debug" or bare and "bare" or "plain", concat(s.kinds)}, {}
  for t, kind in ipairs(s.kinds) do
    if kind ~= "t" then
      types[#types + 1] = s.ptr_types[t]
      key[#key + 1] = tostring(tonumber(s.ptr_types[t]))
    end
  end
  key = concat(key, ":")
  step = steps[key]
  if not step then
    step = compiled(step_source(s.kinds, debug, bare), SLOTS, SLOTS_N, type, next_chunk, cast, tonumber, wrap,
      unpack(types))
    steps[key] = step
  end
  cache[mask] = step
  return step
end

-- Makes writable terms' views mutable, the others const.
local function choose_types(s, writable)
  local mask, bit = 0, 1
  for t, kind in ipairs(s.kinds) do
    if kind ~= "t" then
      -- a check hook validates every write: its views stay const, as views bypass it
      s.canwrite[t] = writable[t] and not s.check[t]
      s.ptr_types[t] = s.canwrite[t] and s.mutable_types[t] or s.const_types[t]
      if s.canwrite[t] then mask = mask + bit end
    end
    bit = bit * 2
  end
  s.mask = mask
end

-- q's state: for q:each_ffi and q:bulk_ffi (strict false, fname naming which) raising when a
-- term cannot be mapped; for q:each and each-systems (strict) false when one cannot.
local pairs_of = setmetatable({}, {__mode = "kv"}) -- Query -> its pair (found without a C call)
-- Calls fn(...) for state_of, an error raised again at the script's line (three frames up).
local function for_script(fn, ...)
  local ok, a, b, c = pcall(fn, ...)
  if ok then return a, b, c end
  raise(a, 4)
end
local function state_of(q, strict, fname)
  local pair = pairs_of[q]
  if not pair then
    pair = for_script(views.state, q)
    if not pair then
      pair = {}
      views.state(q, pair) -- kept by the query
    end
    pairs_of[q] = pair
  end
  local key = strict and "strict" or "full"
  local s = pair[key]
  if s == nil then
    local why
    s, pair[key .. "_name"], why = for_script(make_state, q, strict)
    pair[key .. "_why"] = why
    pair[key] = s or false
  end
  if not s and not strict then refuse(fname, pair.full_name, pair.full_why) end
  return s
end

-- Begins q's FFI loop over its state s, the loop running level frames up from start's caller;
-- returns its step and its loop number (the generic for's state), or nil where the table path
-- must run (a world with a budget). With site (a generic for calling q:each there), the step
-- hands out no entity when that loop's body never reads it (layer.entity_unread, loop_sites.lua).
local function start(q, s, level, fname, stamp, site)
  -- s: the state C empties when the loop ends; its first chunk comes in s.rows (with stamp,
  -- its rows stamped changed at once)
  local loop = next_loop(s)
  if not loop then return nil end
  local gen, system, n, func, line, callee = begin(q, s, s.writable, level + 1, fname, s.rows, stamp, site)
  if not gen then return nil end
  shared.running_system = system
  choose_types(s, s.writable)
  local unread = layer.entity_unread
  local step = step_of(s, kiln.ffi_debug and true or false, func and unread and unread(func, line, callee))
  -- a loop that found no rows has ended already (inside begin): its step hands out none
  s.n, s.tick, s.step, s.gen, s.loop = n, s.r.tick, step, gen, n > 0 and loop or 0
  return step, loop
end

-- q:each_ffi(): for e, a, b in q:each_ffi() do ... end, the views pointing into the columns.
function Query:each_ffi(extra)
  if not pairs_of[self] then check_query(self, "query:each_ffi") end
  if extra ~= nil then no_argument("query:each_ffi", extra) end
  local s = state_of(self, false, "query:each_ffi")
  local step, loop = start(self, s, 2, nil, nil, true)
  -- a world with a budget: the table path (a tail call, so q:each notes the caller's frame
  -- as the one its loop runs in)
  if not step then return each(self) end
  return step, loop
end

-- q:each(): FFI views where every term reads as its table view does (SAME_AS_TABLE), else
-- the table views.
function Query:each(extra)
  if not pairs_of[self] then check_query(self, "query:each") end
  if extra ~= nil then no_argument("query:each", extra) end
  local s = state_of(self, true)
  local step, loop
  if s then step, loop = start(self, s, 2, "query:each", nil, true) end
  if not step then return each(self) end
  return step, loop
end

-- Lua each-systems (systems.c, through klua_jit_push_each_runner): one loop function per
-- system function and query shape, so each system's call site is a trace of its own. Each
-- chunk's rows are stamped in C before they run (an each-system visits them all), and the
-- rows are a numeric for: the views are made inside an iteration, so a branch of the
-- system's function that runs as a side trace (linked back to the loop's start) has
-- nothing to box. With kiln.ffi_debug the loop goes through the step and its checked views.
local function runner_source(kinds)
  local vs, views_of, setup = {}, {}, {}
  for t, k in ipairs(kinds) do
    vs[t] = "v" .. t
    if k == "t" then
      views_of[t] = "true"
    else
      setup[#setup + 1] = format("      local c%d = r.columns[%d]\n      local P%d = c%d ~= nil and cast(types[%d], c%d) or nil\n",
                                 t, t - 1, t, t, t, t)
      views_of[t] = k == "d" and format("P%d + i", t) or format("(P%d and P%d + i)", t, t)
    end
  end
  local list = #vs > 0 and ", " .. concat(vs, ", ") or ""
  local made = #views_of > 0 and ", " .. concat(views_of, ", ") or ""
  return format([[local start, each_rows, next_chunk, cast, tonumber, kiln = ...
return function(q, s, fn, dt)
  local step, loop = start(q, s, 1, "query:each", true)
  if not step then return each_rows(q, fn, dt) end
  if kiln.ffi_debug then
    for e%s in step, loop do fn(e%s, dt) end
    return
  end
  local r, rows, types, n = s.r, s.rows, s.ptr_types, s.n
  while n > 0 do
    local E = r.entities
%s    for i = 0, n - 1 do
      fn(tonumber(E[i])%s, dt)
    end
    n = next_chunk(q, rows, true) or 0
  end
end
]], list, list, concat(setup), made)
end
local runners = setmetatable({}, {__mode = "k"}) -- each function -> {[shape] = its loop}
views.runner(function(q, fn, dt)
  local s = state_of(q, true)
  if not s then return each_rows(q, fn, dt) end
  local mine = runners[fn]
  if not mine then
    mine = {}
    runners[fn] = mine
  end
  local shape = s.shape
  if not shape then
    shape = concat(s.kinds)
    s.shape = shape
  end
  local loop = mine[shape]
  if not loop then
    -- loaded again for each function (not compiled(), which shares one prototype)
    loop = assert(load(runner_source(s.kinds), "=lua/kiln/ffi.lua(each system)"))(start, each_rows, next_chunk,
                                                                                 cast, tonumber, kiln)
    mine[shape] = loop
  end
  return loop(q, s, fn, dt)
end)

-- q:bulk_ffi's loop over the chunks of a query shape: fn(n, entities, views..., ...) per
-- chunk, each a 0-based pointer to n rows; the rows of writable terms are stamped first.
local function bulk_source(kinds)
  local b = {"local next_chunk, cast, it, ptr_types = ...\n",
             "return function(q, fn, ...)\n  while true do\n    local n = next_chunk(q, true) -- rows stamped in C\n",
             "    if not n then return end\n"}
  local args = {}
  for t, k in ipairs(kinds) do
    if k == "t" then
      args[#args + 1] = "true"
    else
      b[#b + 1] = format("    local c%d = it.columns[%d]\n    local P%d = c%d ~= nil and cast(ptr_types[%d], c%d) or nil\n",
                         t, t - 1, t, t, t, t)
      args[#args + 1] = format("P%d", t)
    end
  end
  b[#b + 1] = format("    fn(n, it.entities, %s, ...)\n  end\nend\n", concat(args, ", "))
  return concat(b)
end

-- q:bulk_ffi(fn, ...): fn(n, entities, views..., ...) once per chunk (see bulk_source).
function Query:bulk_ffi(fn, ...)
  check_query(self, "query:bulk_ffi")
  check_fn(fn)
  local s = state_of(self, false, "query:bulk_ffi")
  local loop, system = begin(self, nil, s.writable, 2, "query:bulk_ffi")
  shared.running_system = system
  if not loop then -- a world with a budget: the table path
    return renamed("query:bulk_ffi", pcall(bulk_rows, self, fn, ...))
  end
  choose_types(s, s.writable)
  s.bulk = s.bulk or compiled(bulk_source(s.kinds), next_chunk, cast, s.it, s.ptr_types)
  local ok, err = pcall(s.bulk, self, fn, ...)
  if not ok then
    views.finish(self) -- the loop ends with the call, also when fn raised
    error(err, 0)
  end
end
