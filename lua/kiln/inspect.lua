-- inspect.lua: pretty printing for kiln values, shared by scripts (world:inspect) and the
-- REPL. Invariant: a number prints so it reads back as the same value, and an integer prints
-- as an entity ("12v3") only where it is known to be one: a live entity or an entity field.
local kiln, World, Query, layer = ...

-- Written for Lua 5.4 and LuaJIT alike: no integer operators; under LuaJIT, whose numbers
-- are all floats, an integral number below 2^53 counts as an integer.
local ENTITY_LIMIT = 9007199254740992 -- 2^53: handles are below it (kiln.h)
local INDEX_MAX, GENERATION_MAX = 0xffffffff, 2097151 -- 2^32 - 1, 2^21 - 1
local INDEX_SPAN = 4294967296          -- 2^32: a handle is generation * 2^32 + index
local math_type = math.type or function(v)
  if type(v) ~= "number" then return nil end
  if v == math.floor(v) and v > -ENTITY_LIMIT and v < ENTITY_LIMIT then return "integer" end
  return "float"
end
-- A number with an integral value as an integer, else nil: 2.0 counts, "2" does not (Lua
-- 5.4's math.tointeger converts strings too; LuaJIT's numbers have no such function).
local tointeger = math.tointeger and function(v) return type(v) == "number" and math.tointeger(v) or nil end
  or function(v)
    if math_type(v) == "integer" then return v end
    return nil
  end
-- x rounded to the nearest float (f32), for the texts of float fields.
local to_f32 = string.pack and function(x) return string.unpack("f", string.pack("f", x)) end
  or function(x)
    if x ~= x or x == 0 or x == math.huge or x == -math.huge then return x end
    local m, e = math.frexp(x)
    local bits = 24 - math.max(0, -125 - e) -- fewer bits for a subnormal
    local scaled = m * 2 ^ bits
    local r = math.floor(scaled + 0.5)
    if r - scaled == 0.5 and r % 2 == 1 then r = r - 1 end -- ties to even
    local y = math.ldexp(r / 2 ^ bits, e)
    if math.abs(y) > 3.4028234663852886e38 then return x > 0 and math.huge or -math.huge end
    return y
  end
local QUOTE_MAX = 200                 -- user text quoted in a message is cut here
-- What one showing of a value (kiln.pretty, world:inspect, query:format) may cost, whatever
-- the value holds: a string shows its first STRING_SHOW_MAX bytes, a table SHOW_KEYS_MAX
-- entries; the keys looked at (to pick those entries) and the text made are bounded for the
-- whole value, so showing a 60 MB string or a table of a million keys costs what is shown.
local STRING_SHOW_MAX = 256
local SHOW_KEYS_MAX = 30
local VISIT_KEYS_MAX = 4096           -- keys looked at in all, over every table shown
local SHOW_BYTES_MAX = 65536          -- text made, about (past it the rest shows as ...)
local rawlen = rawlen or function(t) return #t end -- LuaJIT's # on a table calls no __len

-- ---- argument checks, in the binding's words ------------------------------------------

-- The type name luaL_typeerror would use: a class's __name, else the Lua type. Read from the
-- real metatable: what getmetatable shows may be a view (a script cannot rename a class).
local class_name = layer.class_name
local function typename(v)
  return class_name(v) or type(v)
end

-- The first bytes of s, at most n (#s > n), cut before a UTF-8 character.
local function prefix(s, n)
  local cut = n + 1
  while cut > 1 and s:byte(cut) >= 0x80 and s:byte(cut) < 0xc0 do cut = cut - 1 end
  return s:sub(1, cut - 1)
end

-- At most QUOTE_MAX bytes of s, cut before a UTF-8 character, with "..." when cut.
local function bounded(s)
  s = tostring(s)
  if #s <= QUOTE_MAX then return s end
  return prefix(s, QUOTE_MAX) .. "..."
end

-- A string as a quoted Lua string; past STRING_SHOW_MAX bytes its start, then its length:
-- "abc"... (31457280 bytes, cut). Costs what it shows, however long s is.
local function string_text(s)
  if #s <= STRING_SHOW_MAX then return string.format("%q", s) end
  return string.format("%q... (%d bytes, cut)", prefix(s, STRING_SHOW_MAX), #s)
end

-- Any other text shown as it is (a __tostring's), cut the same way.
local function cut_text(s)
  if #s <= STRING_SHOW_MAX then return s end
  return string.format("%s... (%d bytes, cut)", prefix(s, STRING_SHOW_MAX), #s)
end

local function bad_argument(n, fname, detail)
  return string.format("bad argument #%d to '%s' (%s)", n, fname, detail)
end

local function bad_self(fname, class, v)
  return string.format("calling '%s' on bad self (%s expected, got %s)", fname, class, typename(v))
end

-- Calls fn(...) for the function named fname; a runtime error of the binding calls inside
-- (a closed world, an undeclared read in a system) is raised again as "fname: message" at
-- the caller of fname, without the position in this file or the inner method's name.
local function calling(fname, fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then return result end
  if type(result) ~= "string" then error(result, 0) end
  local msg = result:gsub("^lua/kiln/[%w_]+%.lua:%d+: ", "")
  if msg:find("^bad argument") or msg:find("^calling '") then error(msg, 3) end
  error(fname .. ": " .. msg:gsub("^[%a_][%w_.:]*: ", "", 1), 3)
end

-- An entity handle given as a number (integer-valued, 0 <= e < 2^53), or nil.
local function entity_of(v)
  if type(v) ~= "number" then return nil end
  local e = tointeger(v)
  if e and e >= 0 and e < ENTITY_LIMIT then return e end
  return nil
end

local function is_world(v) return typename(v) == "kiln.World" end

-- A world that still answers (not closed).
local function usable(w) return is_world(w) and pcall(World.count, w) end

-- ---- numbers -------------------------------------------------------------------------

-- string.format(spec, x) of one number, with "." as the decimal point whatever the C locale
-- says: Lua 5.4 formats through the C library, so in a host that called setlocale(LC_ALL, "")
-- in a decimal-comma locale (de_DE, fr_FR) 1.5 would print as "1,5", which reads back as two
-- values. The locale's point is asked each time (the host may change it at any moment).
local function number_format(spec, x)
  local s = string.format(spec, x)
  local point = string.format("%.1f", 0.5):sub(2, -2)
  if point == "." then return s end
  local at, last = s:find(point, 1, true)
  if not at then return s end
  return s:sub(1, at - 1) .. "." .. s:sub(last + 1)
end

-- The shortest "%.Ng" text of x that reads back as x; with f32, that reads back into a
-- float field as the same float. Integral floats keep a ".0" unless as_field, so 2.0
-- prints as 2.0 in a value and as 2 in a float field (whose type already says float).
local function float_text(x, f32, as_field)
  if x ~= x then return "0/0" end
  if x == math.huge then return "math.huge" end
  if x == -math.huge then return "-math.huge" end
  local text
  local first, last = 15, 17
  if f32 then first, last = 6, 9 end
  for digits = first, last do
    local s = number_format("%." .. digits .. "g", x)
    local back = tonumber(s)
    if f32 then back = to_f32(back) end
    if back == x then
      text = s
      break
    end
  end
  text = text or number_format("%.17g", x)
  if not as_field and text:match("^%-?%d+$") then text = text .. ".0" end
  return text
end

local function number_text(v, f32, as_field)
  if math_type(v) == "integer" then
    -- the one integer whose decimal text reads back as a float
    if v == math.mininteger then return "math.mininteger" end -- nil under LuaJIT
    return string.format("%d", v)
  end
  return float_text(v, f32, as_field)
end

-- ---- entities ------------------------------------------------------------------------

local function handle_text(e)
  return string.format("%dv%d", e % INDEX_SPAN, math.floor(e / INDEX_SPAN) % (GENERATION_MAX + 1))
end

--- kiln.handle(e) -> "12v3" (index v generation).
function kiln.handle(e)
  local id = entity_of(e)
  if not id then
    local got = type(e) == "number" and number_text(e) or typename(e)
    error(bad_argument(1, "kiln.handle", "entity expected, got " .. got), 2)
  end
  return handle_text(id)
end

--- kiln.entity(text or e) -> the handle "12v3" names (or the handle given).
function kiln.entity(v)
  if type(v) == "number" then
    local id = entity_of(v)
    if not id then error(bad_argument(1, "kiln.entity", "entity expected, got " .. number_text(v)), 2) end
    return id
  end
  if type(v) ~= "string" then
    error(bad_argument(1, "kiln.entity", "entity or handle text expected, got " .. typename(v)), 2)
  end
  local index, generation = v:match("^(%d+)v(%d+)$")
  if not index then
    error(bad_argument(1, "kiln.entity", string.format('handle text like "12v3" expected, got %q', bounded(v))), 2)
  end
  index = #index <= 10 and tointeger(tonumber(index))
  generation = #generation <= 7 and tointeger(tonumber(generation))
  if not (index and generation and index <= INDEX_MAX and generation <= GENERATION_MAX) then
    error(bad_argument(1, "kiln.entity", string.format(
      "handle %q out of range (index up to %d, generation up to %d)", bounded(v), INDEX_MAX, GENERATION_MAX)), 2)
  end
  return generation * INDEX_SPAN + index
end

-- A live entity of world (the only integers that print as entities in a value).
local function is_live(world, v)
  if not world or math_type(v) ~= "integer" or v <= 0 or v >= ENTITY_LIMIT then return false end
  local ok, alive = pcall(World.is_alive, world, v)
  return ok and alive
end

-- An entity field: its handle, marked when it no longer names a live entity.
local function entity_field_text(v, world)
  if v == 0 then return "0" end
  local id = entity_of(v)
  if not id then return number_text(v) end
  if world and not is_live(world, id) then return handle_text(id) .. " (dead)" end
  return handle_text(id)
end

-- ---- values --------------------------------------------------------------------------

-- How one field shows: kind "f32" (float, vectors, quat, mat4), "entity", or nil.
local function field_text(v, kind, world)
  local t = type(v)
  if t == "number" then
    if kind == "entity" then return entity_field_text(v, world) end
    return number_text(v, kind == "f32", true)
  elseif t == "string" then
    return string_text(v)
  elseif t == "table" then
    if type(v.x) == "number" then
      local parts = {}
      for _, k in ipairs{"x", "y", "z", "w"} do
        if v[k] ~= nil then parts[#parts + 1] = field_text(v[k], kind, world) end
      end
      return "(" .. table.concat(parts, ", ") .. ")"
    end
    local parts = {}
    for i = 1, math.min(#v, 16) do parts[i] = field_text(v[i], kind, world) end
    if #v > 16 then parts[#parts + 1] = "..." end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return cut_text(tostring(v))
end

-- A value on one line: numbers as they read back, live entities as handles.
local function scalar(v, world)
  if type(v) == "number" then
    if is_live(world, v) then return handle_text(v) end
    return number_text(v)
  elseif type(v) == "string" then
    return string_text(v)
  end
  return cut_text(tostring(v))
end

-- What is left to one showing of a value: keys to look at, bytes of text to make.
local function show_budget()
  return {keys = VISIT_KEYS_MAX, bytes = SHOW_BYTES_MAX}
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

-- The keys of table t to show, in an order that is the same for the same table: 1, 2, ...
-- of its sequence (rawlen: no __len runs), then, of the other keys among the first next
-- visits (budget.keys at most, taken from it), the least in key_order. Returns them, how
-- many keys were left out, and whether next had more to give (then that count is a floor).
-- The cost is the keys looked at, never the table's size: nothing sorts every key.
-- A table shows its own contents, read raw as the binding reads tables (no __pairs or
-- __index runs: one returning a number made kiln's own loop fail, "attempt to call a number
-- value"), and the same under LuaJIT, whose pairs calls no __pairs.
local function keys_to_show(t, budget)
  local len = rawlen(t)
  local keys = {}
  for i = 1, math.min(len, SHOW_KEYS_MAX) do keys[i] = i end
  local others, visited, more = {}, 0, false
  local k = next(t)
  while k ~= nil do
    if visited >= budget.keys then
      more = true
      break
    end
    visited = visited + 1
    if not (math_type(k) == "integer" and k >= 1 and k <= len) then others[#others + 1] = k end
    k = next(t, k)
  end
  budget.keys = budget.keys - visited
  table.sort(others, key_order)
  local array = #keys
  for i = 1, math.min(#others, SHOW_KEYS_MAX - array) do keys[#keys + 1] = others[i] end
  return keys, (len - array) + (#others - (#keys - array)), more
end

local function generic(v, depth, seen, world, budget)
  if type(v) ~= "table" then return scalar(v, world) end
  if seen[v] then return "<cycle>" end
  if depth > 2 then return "{...}" end
  seen[v] = true
  local keys, left, more = keys_to_show(v, budget)
  local parts = {}
  for n, k in ipairs(keys) do
    if budget.bytes <= 0 then -- the value's text is long enough: the rest is counted
      left = left + #keys - n + 1
      break
    end
    local name = type(k) == "string" and #k <= STRING_SHOW_MAX and k:match("^[%a_][%w_]*$")
    local key = name and k or ("[" .. scalar(k, world) .. "]")
    if math_type(k) == "integer" and k == n then key = nil end
    local part = (key and (key .. " = ") or "") .. generic(rawget(v, k), depth + 1, seen, world, budget)
    budget.bytes = budget.bytes - #part - 2
    parts[#parts + 1] = part
  end
  if left > 0 then parts[#parts + 1] = string.format("... %s%d more", more and "at least " or "", left)
  elseif more then parts[#parts + 1] = "..." end
  seen[v] = nil
  return "{" .. table.concat(parts, ", ") .. "}"
end

local FLOAT_TYPES = {float = true, vec2 = true, vec3 = true, vec4 = true, quat = true, mat4 = true}

local function field_kind(ftype)
  if ftype == "entity" then return "entity" end
  if FLOAT_TYPES[ftype] then return "f32" end
  return nil
end

local function fields_line(world, name, value, budget)
  local info = world:component_info(name)
  if not info or info.kind == "tag" then return name end
  if info.kind == "lua" then return name .. " = " .. generic(value, 0, {}, world, budget) end
  local parts = {}
  for _, f in ipairs(info.fields) do
    parts[#parts + 1] = f.name .. " = " .. field_text(value[f.name], field_kind(f.type), world)
  end
  return name .. " { " .. table.concat(parts, ", ") .. " }"
end

local function inspect_text(world, id)
  if not world:is_alive(id) then return string.format("entity %s (dead)", handle_text(id)) end
  local names = world:components(id)
  table.sort(names)
  local lines = {string.format("entity %s (alive, %d components)", handle_text(id), #names)}
  local budget = show_budget()
  for _, name in ipairs(names) do
    lines[#lines + 1] = "  " .. fields_line(world, name, world:get(id, name), budget)
  end
  return table.concat(lines, "\n")
end

--- world:inspect(e) -> a multi-line description of an entity and its components.
function World:inspect(e)
  if not is_world(self) then error(bad_self("world:inspect", "kiln.World", self), 2) end
  local id = entity_of(e)
  if not id then
    local got = type(e) == "number" and number_text(e) or typename(e)
    error(bad_argument(1, "world:inspect", "entity expected, got " .. got), 2)
  end
  local text = calling("world:inspect", inspect_text, self, id)
  return text
end

--- world:schema(name) -> "component Position (8 bytes): float x; float y;"
function World:schema(name)
  if not is_world(self) then error(bad_self("world:schema", "kiln.World", self), 2) end
  if type(name) ~= "string" and type(name) ~= "number" then
    error(bad_argument(1, "world:schema", "component name expected, got " .. typename(name)), 2)
  end
  local info = calling("world:schema", World.component_info, self, name)
  if not info and type(name) == "number" then
    error(string.format("world:schema: unknown component #%s", number_text(name)), 2)
  end
  if not info then error(string.format("world:schema: unknown component '%s'", bounded(name)), 2) end
  if info.kind == "tag" then return string.format("component %s (tag)", info.name) end
  if info.kind == "lua" then return string.format("component %s (Lua values)", info.name) end
  return string.format("component %s (%d bytes): %s", info.name, info.size, info.schema)
end

-- ---- tables of text ------------------------------------------------------------------

-- A cell as text: strings as they are, numbers as they read back; nil when neither.
local function cell_text(c)
  if type(c) == "string" then return c end
  if type(c) == "number" then return number_text(c) end
  return nil
end

-- Lays out rows (lists of strings) under a header, columns padded to their widths.
-- Checks every argument first, so a bad one is reported by the caller's name.
local function table_text(header, rows, more, fname)
  if type(header) ~= "table" then
    return nil, bad_argument(1, fname, "table expected, got " .. typename(header))
  end
  if type(rows) ~= "table" then
    return nil, bad_argument(2, fname, "table expected, got " .. typename(rows))
  end
  if more ~= nil and not tointeger(more) then
    return nil, bad_argument(3, fname, "integer expected, got " .. typename(more))
  end
  more = more and tointeger(more)
  local head = {}
  for i, h in ipairs(header) do
    head[i] = cell_text(h)
    if not head[i] then
      return nil, bad_argument(1, fname, string.format("header cell %d: string expected, got %s", i, typename(h)))
    end
  end
  local body = {}
  for r, row in ipairs(rows) do
    if type(row) ~= "table" then
      return nil, bad_argument(2, fname, string.format("row %d: table expected, got %s", r, typename(row)))
    end
    local cells = {}
    for i, c in ipairs(row) do
      cells[i] = cell_text(c)
      if not cells[i] then
        return nil, bad_argument(2, fname, string.format("row %d, cell %d: string expected, got %s", r, i, typename(c)))
      end
    end
    body[r] = cells
  end
  local widths = {}
  for i, h in ipairs(head) do widths[i] = #h end
  for _, cells in ipairs(body) do
    for i, c in ipairs(cells) do widths[i] = math.max(widths[i] or 0, #c) end
  end
  local function line(cells)
    local out = {}
    for i, c in ipairs(cells) do out[i] = c .. string.rep(" ", widths[i] - #c) end
    return (table.concat(out, "  "):gsub("%s+$", ""))
  end
  local lines = {line(head)}
  local rule = {}
  for i = 1, #head do rule[i] = string.rep("-", widths[i]) end
  lines[#lines + 1] = line(rule)
  for _, cells in ipairs(body) do lines[#lines + 1] = line(cells) end
  if more and more > 0 then lines[#lines + 1] = string.format("... %d more", more) end
  return table.concat(lines, "\n")
end

--- kiln.table_text(header, rows [, more]) -> rows laid out under a header.
function kiln.table_text(header, rows, more)
  local text, err = table_text(header, rows, more, "kiln.table_text")
  if not text then error(err, 2) end
  return text
end

-- The rows of query (checked arguments) as a text table.
local function format_text(query, world, limit)
  local header = {"entity"}
  local cols = {}
  local wrong_world = bad_argument(1, "query:format", "the world of the query expected")
  for _, name in ipairs(query:terms()) do
    local info = world:component_info(name)
    if not info then error(wrong_world, 0) end
    if info.kind == "data" then
      for _, f in ipairs(info.fields) do
        header[#header + 1] = name .. "." .. f.name
        cols[#cols + 1] = {name, f.name, field_kind(f.type)}
      end
    else
      header[#header + 1] = name
      cols[#cols + 1] = {name}
    end
  end
  local rows, total, budget = {}, query:count(), show_budget()
  -- q:entities visits no values: a view loop under LuaJIT would stamp every row it visits
  for _, e in ipairs(query:entities(limit)) do
    if not world:is_alive(e) then error(wrong_world, 0) end
    local row = {handle_text(e)}
    for _, c in ipairs(cols) do
      local v = world:get(e, c[1])
      if c[2] then v = v and v[c[2]] end
      row[#row + 1] = v == nil and "-" or (c[2] and field_text(v, c[3], world) or generic(v, 0, {}, world, budget))
    end
    rows[#rows + 1] = row
  end
  return (table_text(header, rows, total - #rows))
end

--- query:format(world [, limit]) -> the matched entities as a table, one column per field.
function Query:format(world, limit)
  if typename(self) ~= "kiln.Query" then error(bad_self("query:format", "kiln.Query", self), 2) end
  if not is_world(world) then
    error(bad_argument(1, "query:format", "kiln.World expected, got " .. typename(world)), 2)
  end
  -- another world with the same names and handles would show its own rows as the query's
  if not layer.is_query(self, world) then
    error(bad_argument(1, "query:format", "the world of the query expected"), 2)
  end
  if limit ~= nil and (not tointeger(limit) or limit < 0) then
    local got = type(limit) == "number" and number_text(limit) or typename(limit)
    error(bad_argument(2, "query:format", "row limit (integer >= 0) expected, got " .. got), 2)
  end
  local text = calling("query:format", format_text, self, world, limit and tointeger(limit) or 20)
  return text
end

-- ---- system lists --------------------------------------------------------------------

-- A copy of list (a table) and of its entries' fields, each read once and raw: checked and
-- formatted from the copy, an entry cannot change between the two (an __index answering a
-- table to the check and a number to the formatting reached kiln's own code).
local SYSTEM_FIELDS = {"name", "kind", "stage", "runs", "enabled", "last_ms", "avg_ms"}
local function systems_copy(list)
  local copy, i = {}, 1
  local s = rawget(list, 1)
  while s ~= nil do
    if type(s) == "table" then
      local c = {}
      for _, k in ipairs(SYSTEM_FIELDS) do c[k] = rawget(s, k) end
      s = c
    end
    copy[i], i = s, i + 1
    s = rawget(list, i)
  end
  return copy
end

-- nil when list (a systems_copy) looks like world:systems(), else what is wrong with it.
local function systems_problem(list)
  for i, s in ipairs(list) do
    if type(s) ~= "table" then return string.format("entry %d: table expected, got %s", i, typename(s)) end
    if type(s.name) ~= "string" or type(s.kind) ~= "string" or math_type(s.stage) ~= "integer"
        or math_type(s.runs) ~= "integer" then
      return string.format("entry %d: a world:systems() entry expected (name, kind, stage, runs)", i)
    end
    for _, k in ipairs{"last_ms", "avg_ms"} do
      if s[k] ~= nil and type(s[k]) ~= "number" then
        return string.format("entry %d: %s: number expected, got %s", i, k, typename(s[k]))
      end
    end
  end
  return nil
end

local function systems_text(list)
  local rows = {}
  for _, s in ipairs(list) do
    rows[#rows + 1] = {s.name, tostring(s.stage), s.kind, s.enabled and "yes" or "no", tostring(s.runs),
      number_format("%.3f", s.last_ms or 0), number_format("%.3f", s.avg_ms or 0)}
  end
  return (table_text({"system", "stage", "kind", "enabled", "runs", "last ms", "avg ms"}, rows))
end

--- kiln.systems_text(list) -> a world:systems() list as a table.
function kiln.systems_text(list)
  if type(list) ~= "table" then error(bad_argument(1, "kiln.systems_text", "table expected, got " .. typename(list)), 2) end
  list = systems_copy(list)
  local problem = systems_problem(list)
  if problem then error(bad_argument(1, "kiln.systems_text", problem), 2) end
  return systems_text(list)
end

-- ---- any value -----------------------------------------------------------------------

local function is_component_info(v)
  return type(v) == "table" and type(v.name) == "string" and v.schema ~= nil and v.kind ~= nil and v.fields ~= nil
end

local function pretty_text(v, world)
  local name = typename(v)
  if name == "kiln.Query" then
    if world then
      local ok, text = pcall(Query.format, v, world)
      if ok then return text end
    end
    return tostring(v)
  end
  if name == "kiln.World" then
    local ok, st = pcall(World.stats, v)
    if not ok then return tostring(v) end
    return string.format("kiln.World (%d entities, %d archetypes, %d components, tick %d)",
      st.entities, st.archetypes, st.components, st.tick)
  end
  if is_live(world, v) then return inspect_text(world, v) end
  if world and is_component_info(v) then
    local ok, text = pcall(World.schema, world, v.name)
    if ok then return text end
  end
  -- (a list past a schedule's size is not one: systems_problem would walk all of it)
  if type(v) == "table" and rawlen(v) > 0 and rawlen(v) <= 1024 then
    local list = systems_copy(v)
    if not systems_problem(list) then return systems_text(list) end
  end
  return generic(v, 0, {}, world, show_budget())
end

--- kiln.pretty(value [, world]) -> how the REPL shows a value.
function kiln.pretty(v, world)
  if world ~= nil and not is_world(world) then
    error(bad_argument(2, "kiln.pretty", "kiln.World expected, got " .. typename(world)), 2)
  end
  if world ~= nil and not usable(world) then world = nil end
  local text = calling("kiln.pretty", pretty_text, v, world)
  return text
end

-- Helpers the layer's later files (repl.lua) share instead of repeating.
layer.typename, layer.bounded, layer.bad_argument, layer.QUOTE_MAX = typename, bounded, bad_argument, QUOTE_MAX
layer.cut_text = cut_text
layer.number_format = number_format
layer.math_type, layer.tointeger = math_type, tointeger -- the same under Lua 5.4 and LuaJIT
