-- ffi.lua: q:each_ffi() and q:bulk_ffi(), loops whose views are LuaJIT FFI pointers into the
-- columns (C half: lua/src/jit_views.c). Under Lua 5.4 and where FFI is off: the table path.
local kiln, World, Query, layer = ...
local views = layer.views
-- Where the table path runs: each row as a chunk of one, its views the tables of q:each at [0].
local function rows_source(count)
  local vs, cs, set, args = {}, {}, {}, {}
  for t = 1, count do
    vs[t], cs[t] = "v" .. t, "C" .. t
    set[t] = string.format("    C%d[0] = v%d\n", t, t)
    args[t] = string.format("v%d ~= nil and C%d or nil", t, t)
  end
  return string.format("local unpack = ...\nreturn function(q, fn, extra, n_extra)\n  local E = {}\n" ..
    "  local %s = %s\n  for e, %s in q:each() do\n    E[0] = e\n%s    fn(1, E, %s, unpack(extra, 1, n_extra))\n  end\nend\n",
    table.concat(cs, ", "), string.rep("{}, ", count - 1) .. "{}", table.concat(vs, ", "), table.concat(set),
    table.concat(args, ", "))
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
  local rows = compiled(rows_source(count), table.unpack or unpack)
  return rows(q, fn, {...}, select("#", ...))
end

-- Raises unless q is a kiln.Query, naming the method fname.
local is_query = layer.is_query
local function check_query(q, fname)
  if is_query(q) then return end
  local mt = getmetatable(q)
  local name = type(mt) == "table" and rawget(mt, "__name")
  error(string.format("calling '%s' on bad self (kiln.Query expected, got %s)", fname,
                      type(name) == "string" and name or type(q)), 3)
end

-- Calls fn(...), raising its error again with a leading "query:each: " renamed to fname's
-- (the table path runs q:each for q:each_ffi and q:bulk_ffi).
local function renamed(fname, ok, ...)
  if ok then return ... end
  local err = ...
  if type(err) == "string" and err:find("^query:each: ") then err = fname .. err:sub(11) end
  error(err, 0)
end

local function check_fn(fn)
  if type(fn) ~= "function" then
    error(string.format("bad argument #1 to 'query:bulk_ffi' (function expected, got %s)", type(fn)), 3)
  end
end

local each = Query.each
if not views then -- Lua 5.4, or a state without the ffi library (a mod's): table views
  function Query:each_ffi()
    check_query(self, "query:each_ffi")
    -- LuaJIT (a mod's state): a tail call, so q:each notes the caller's frame as the one its
    -- loop runs in (jit_methods.c); its errors then name q:each
    if _VERSION == "Lua 5.1" then return each(self) end
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
local cast, typeof, tonumber, format = ffi.cast, ffi.typeof, tonumber, string.format
local next_chunk, begin, alive = views.next, views.begin, views.alive

-- The head of a kiln_iter (kiln.h), as far as the loops read it; checked against the C layout.
local LAYOUT = views.layout
local ITER
do
  local decl = format([[struct { int32_t count; int32_t term_count; const uint64_t *entities;
    void *columns[%d]; uint32_t *ticks[%d]; uint32_t tick; }]], LAYOUT.max_terms, LAYOUT.max_terms)
  local ct = typeof(decl)
  for _, field in ipairs({"count", "entities", "columns", "ticks", "tick"}) do
    assert(ffi.offsetof(ct, field) == LAYOUT[field], "lua/kiln/ffi.lua: kiln_iter's layout changed: " .. field)
  end
  ITER = typeof("$ *", ct)
end
local C_KEYWORDS = {}
for w in ([[auto break case char const continue default do double else enum extern float for
  goto if inline int long register restrict return short signed sizeof static struct switch
  typedef union unsigned void volatile while bool _Bool _Complex _Imaginary]]):gmatch("%S+") do
  C_KEYWORDS[w] = true
end

local function refuse(term, why)
  error(format("query:each_ffi: %s cannot be mapped to an FFI type: %s (use q:each)", term.name, why), 3)
end

-- The FFI struct of a data term, its fields at the core's offsets; checked against the layout.
local structs = {n = 0} -- struct body -> its named struct and pointer types, one per layout
local function struct_of(term)
  if term.kind == "lua" then refuse(term, "it holds Lua values") end
  local fields = {}
  for i, f in ipairs(term.fields) do fields[i] = f end
  if #fields == 0 then refuse(term, "it has no reflected fields") end
  table.sort(fields, function(a, b) return a.offset < b.offset end)
  local parts, pos = {}, 0
  for _, f in ipairs(fields) do
    if not f.ctype then refuse(term, format("field '%s' has type %s", f.name, f.type)) end
    if not f.name:match("^[%a_][%w_]*$") or C_KEYWORDS[f.name] or f.name:match("^__kiln_pad") then
      refuse(term, format("field '%s' is not a C name", f.name:sub(1, 64)))
    end
    if f.offset < pos then refuse(term, format("field '%s' overlaps another", f.name)) end
    if f.offset > pos then parts[#parts + 1] = format("uint8_t __kiln_pad%d[%d];", pos, f.offset - pos) end
    -- as the table path reads them: count 0 or 1 is one value, except a char array
    local array = f.count > 1 or (f.ctype == "char" and f.count > 0)
    local n = array and f.count or 1
    local dims = array and format("[%d]", f.count) or ""
    if f.ctype == "float[16]" then
      parts[#parts + 1] = format("float %s%s[16];", f.name, dims)
    else
      parts[#parts + 1] = format("%s %s%s;", f.ctype, f.name, dims)
    end
    pos = f.offset + f.elem_size * n
  end
  if term.stride > pos then parts[#parts + 1] = format("uint8_t __kiln_pad%d[%d];", pos, term.stride - pos) end
  local body = table.concat(parts, " ")
  local ct = structs[body]
  if not ct then
    -- a named struct: ffi.typeof("$ *", ct) of an anonymous one can hand out another's pointer
    -- (names are per Lua state: a module loaded again finds its earlier ones taken)
    local name, ok, err
    repeat
      structs.n = structs.n + 1
      name = format("kiln_view_%d", structs.n)
      ok, err = pcall(ffi.cdef, format("struct %s { %s };", name, body))
    until ok or not tostring(err):find("redefine", 1, true)
    if not ok then refuse(term, tostring(err)) end
    ct = {name = name, struct = typeof("struct " .. name), ptr = typeof("struct " .. name .. " *"),
          const_ptr = typeof("const struct " .. name .. " *")}
    if ffi.sizeof(ct.struct) ~= term.stride then
      refuse(term, format("its FFI size %d is not its stride %d", ffi.sizeof(ct.struct), term.stride))
    end
    for _, f in ipairs(fields) do
      if ffi.offsetof(ct.struct, f.name) ~= f.offset then
        refuse(term, format("field '%s' lies at %d in C, %d in FFI", f.name, f.offset, ffi.offsetof(ct.struct, f.name)))
      end
    end
    structs[body] = ct
  end
  return ct
end

-- The step of a query shape, kinds[t] "d" (a data term) or "t" (a tag with-term): one function
-- per shape for every query, called with the query's state s (the generic for's state), so a
-- loop site that goes over several queries keeps one trace (a closure per query would make
-- each new query a side trace, where the views are no longer sunk and become garbage). s holds
-- the row (i, n) and the chunk's pointers (E, P<t>, T<t>; false when absent). In the debug
-- form each view goes through wrap(s, t, pointer).
local function step_source(kinds, debug)
  local b = {"local next_chunk, cast, tonumber, wrap = ...\n", "local function reset(s)\n  s.n, s.i = 0, -1\n"}
  local data = {}
  for t, k in ipairs(kinds) do if k == "d" then data[#data + 1] = t end end
  for _, t in ipairs(data) do b[#b + 1] = format("  s.P%d, s.T%d = false, false\n", t, t) end
  b[#b + 1] = "end\nlocal function step(s)\n  local i = s.i + 1\n  if i >= s.n then\n"
  b[#b + 1] = "    local n = next_chunk(s.q)\n    if not n then reset(s) return nil end\n"
  b[#b + 1] = "    i = 0\n    s.n = n\n    local it = s.it\n    s.E = it.entities\n    s.tick = it.tick\n"
  for _, t in ipairs(data) do
    b[#b + 1] = format("    local c%d = it.columns[%d]\n    s.P%d = c%d ~= nil and cast(s.ptr_types[%d], c%d) or false\n",
                       t, t - 1, t, t, t, t)
    b[#b + 1] = format("    local k%d = it.ticks[%d]\n    s.T%d = (s.canwrite[%d] and c%d ~= nil and k%d ~= nil) and k%d or false\n",
                       t, t - 1, t, t, t, t, t)
  end
  b[#b + 1] = "  end\n  s.i = i\n"
  for _, t in ipairs(data) do b[#b + 1] = format("  local T%d = s.T%d\n  if T%d then T%d[i] = s.tick end\n", t, t, t, t) end
  for _, t in ipairs(data) do b[#b + 1] = format("  local P%d = s.P%d\n", t, t) end
  b[#b + 1] = "  return tonumber(s.E[i])"
  for t, k in ipairs(kinds) do
    if k == "t" then
      b[#b + 1] = ", true"
    elseif debug then
      b[#b + 1] = format(", P%d and wrap(s, %d, P%d + i) or nil", t, t, t)
    else
      b[#b + 1] = format(", P%d and P%d + i or nil", t, t)
    end
  end
  b[#b + 1] = "\nend\nreturn step, reset\n"
  return table.concat(b)
end

local steps = {} -- step source -> {step, reset}: one per shape

-- Debug views: a table per row that checks, on every use, that its loop still runs.
local PTR, LOOP, TERM = {}, {}, {}

local function view_dead(v)
  return not alive(v[TERM].q, v[LOOP])
end
local debug_meta = {
  __index = function(v, k)
    if view_dead(v) then error(format("a %s view was used after its loop ended", v[TERM].name), 2) end
    return v[PTR][k]
  end,
  __newindex = function(v, k, value)
    local term = v[TERM]
    if view_dead(v) then error(format("a %s view was used after its loop ended", term.name), 2) end
    if not term.s.canwrite[term.t] then
      error(format("%s is read-only here (declare it in writes to change it)", term.name), 2)
    end
    v[PTR][k] = value
  end,
  __tostring = function(v) return "kiln FFI view of " .. v[TERM].name end,
}

-- A debug view of term t of the row at pointer ptr, for the loop of state s running now.
local function wrap(s, t, ptr)
  return setmetatable({[PTR] = ptr, [LOOP] = s.loop, [TERM] = s.terms[t]}, debug_meta)
end

local function make_state(q)
  local terms = views.terms(q)
  local s = {kinds = {}, ptr_types = {}, const_types = {}, mutable_types = {}, names = {}, canwrite = {}, check = {}, writable = {}, it = cast(ITER, views.iter(q))}
  for t, term in ipairs(terms) do
    s.names[t] = term.name
    if term.kind == "tag" then
      if term.optional then refuse(term, "an optional tag has no column to point into") end
      s.kinds[t] = "t"
    else
      local ct = struct_of(term)
      s.kinds[t] = "d"
      s.const_types[t] = ct.const_ptr
      s.mutable_types[t] = ct.ptr
      s.check[t] = term.check
    end
  end
  s.terms, s.q = {}, q
  for t in ipairs(terms) do s.terms[t] = {name = s.names[t], t = t, s = s, q = q} end
  for _, debug in ipairs({false, true}) do
    local src = step_source(s.kinds, debug)
    local pair = steps[src]
    if not pair then
      pair = {compiled(src, next_chunk, cast, tonumber, wrap)}
      steps[src] = pair
    end
    if debug then s.dstep, s.dreset = pair[1], pair[2] else s.step, s.reset = pair[1], pair[2] end
  end
  s.reset(s)
  return s
end

-- Notes the loop begun and makes writable terms' views mutable, the others const.
local function choose_types(s, loop, writable)
  s.loop = loop
  for t, kind in ipairs(s.kinds) do
    if kind == "d" then
      -- a check hook validates every write: its views stay const, as views bypass it
      s.canwrite[t] = writable[t] and not s.check[t]
      s.ptr_types[t] = s.canwrite[t] and s.mutable_types[t] or s.const_types[t]
    end
  end
end

local function state_of(q)
  local s = views.state(q)
  if not s then
    s = make_state(q)
    views.state(q, s)
  end
  return s
end

-- q:each_ffi(): for e, a, b in q:each_ffi() do ... end, the views pointing into the columns.
function Query:each_ffi()
  check_query(self, "query:each_ffi")
  local s = state_of(self)
  local debug = kiln.ffi_debug and true or false
  local step = debug and s.dstep or s.step
  s.reset(s)
  local loop = begin(self, s, s.writable) -- s: the loop's for-state, by which it is found running
  -- a world with a budget: the table path (a tail call, so q:each notes the caller's frame
  -- as the one its loop runs in)
  if not loop then return each(self) end
  choose_types(s, loop, s.writable)
  return step, s
end


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
  b[#b + 1] = format("    fn(n, it.entities, %s, ...)\n  end\nend\n", table.concat(args, ", "))
  return table.concat(b)
end

-- q:bulk_ffi(fn, ...): fn(n, entities, views..., ...) once per chunk (see bulk_source).
function Query:bulk_ffi(fn, ...)
  check_query(self, "query:bulk_ffi")
  check_fn(fn)
  local s = state_of(self)
  local loop = begin(self, nil, s.writable)
  if not loop then -- a world with a budget: the table path
    return renamed("query:bulk_ffi", pcall(bulk_rows, self, fn, ...))
  end
  choose_types(s, loop, s.writable)
  s.bulk = s.bulk or compiled(bulk_source(s.kinds), next_chunk, cast, s.it, s.ptr_types)
  local ok, err = pcall(s.bulk, self, fn, ...)
  if not ok then
    views.finish(self) -- the loop ends with the call, also when fn raised
    error(err, 0)
  end
end
