-- inspect.lua: pretty printing for kiln values, shared by scripts (world:inspect) and the
-- REPL: entities with their components, queries as tables, schemas, system lists.
local kiln, World, Query = ...

local ENTITY_MIN, ENTITY_MAX = 1 << 32, 1 << 53

local function handle(e)
  return string.format("%dv%d", e & 0xffffffff, (e >> 32) & 0x1fffff)
end
kiln.handle = handle

local function is_entity_like(v)
  return math.type(v) == "integer" and v >= ENTITY_MIN and v < ENTITY_MAX
end

-- A value on one line: numbers trimmed, strings quoted, vectors {x, y, z}.
local function scalar(v)
  local t = type(v)
  if t == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return (string.format("%.4g", v))
  elseif t == "string" then
    return string.format("%q", v)
  elseif t == "table" then
    if v.x ~= nil and type(v.x) == "number" then
      local parts = {}
      for _, k in ipairs{"x", "y", "z", "w"} do
        if v[k] ~= nil then parts[#parts + 1] = scalar(v[k]) end
      end
      return "(" .. table.concat(parts, ", ") .. ")"
    end
    local parts = {}
    for i = 1, math.min(#v, 16) do parts[i] = scalar(v[i]) end
    if #v > 16 then parts[#parts + 1] = "..." end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return tostring(v)
end

local function fields_line(world, name, value)
  local info = world:component_info(name)
  if not info or info.kind == "tag" then return name end
  if info.kind == "lua" then return name .. " = " .. kiln.pretty(value) end
  local parts = {}
  for _, f in ipairs(info.fields) do
    local v = value[f.name]
    local text = (f.type == "entity" and math.type(v) == "integer" and v ~= 0) and handle(v) or scalar(v)
    parts[#parts + 1] = f.name .. " = " .. text
  end
  return name .. " { " .. table.concat(parts, ", ") .. " }"
end

--- world:inspect(e) -> a multi-line description of an entity and its components.
function World:inspect(e)
  if math.type(e) ~= "integer" then error("world:inspect: entity must be an integer, got " .. type(e), 2) end
  if not self:is_alive(e) then return string.format("entity %s (dead)", handle(e)) end
  local names = self:components(e)
  table.sort(names)
  local lines = {string.format("entity %s (alive, %d components)", handle(e), #names)}
  for _, name in ipairs(names) do
    lines[#lines + 1] = "  " .. fields_line(self, name, self:get(e, name))
  end
  return table.concat(lines, "\n")
end

--- world:schema(name) -> "component Position (8 bytes): float x; float y;"
function World:schema(name)
  local info = self:component_info(name)
  if not info then error("world:schema: unknown component '" .. tostring(name) .. "'", 2) end
  if info.kind == "tag" then return string.format("component %s (tag)", info.name) end
  if info.kind == "lua" then return string.format("component %s (Lua values)", info.name) end
  return string.format("component %s (%d bytes): %s", info.name, info.size, info.schema)
end

-- Lays out rows (lists of strings) under a header, columns padded to their widths.
local function table_text(header, rows, more)
  local widths = {}
  for i, h in ipairs(header) do widths[i] = #h end
  for _, r in ipairs(rows) do
    for i, c in ipairs(r) do widths[i] = math.max(widths[i] or 0, #c) end
  end
  local function line(cells)
    local out = {}
    for i, c in ipairs(cells) do out[i] = c .. string.rep(" ", widths[i] - #c) end
    return (table.concat(out, "  "):gsub("%s+$", ""))
  end
  local lines = {line(header)}
  local rule = {}
  for i = 1, #header do rule[i] = string.rep("-", widths[i]) end
  lines[#lines + 1] = line(rule)
  for _, r in ipairs(rows) do lines[#lines + 1] = line(r) end
  if more and more > 0 then lines[#lines + 1] = string.format("... %d more", more) end
  return table.concat(lines, "\n")
end
kiln.table_text = table_text

--- query:rows(world, limit) -> the matched entities as a table, one column per field.
function Query:format(world, limit)
  limit = limit or 20
  local terms = self:terms()
  local header = {"entity"}
  local cols = {}
  for _, name in ipairs(terms) do
    local info = world:component_info(name)
    if info and info.kind == "data" then
      for _, f in ipairs(info.fields) do
        header[#header + 1] = name .. "." .. f.name
        cols[#cols + 1] = {name, f.name, f.type}
      end
    else
      header[#header + 1] = name
      cols[#cols + 1] = {name}
    end
  end
  local rows, total = {}, self:count()
  for e in self:each() do
    if #rows >= limit then break end
    local row = {handle(e)}
    for _, c in ipairs(cols) do
      local v = world:get(e, c[1])
      if c[2] then v = v and v[c[2]] end
      if c[3] == "entity" and math.type(v) == "integer" and v ~= 0 then v = handle(v) end
      row[#row + 1] = v == nil and "-" or (type(v) == "string" and c[3] == "entity" and v or scalar(v))
    end
    rows[#rows + 1] = row
  end
  return table_text(header, rows, total - #rows)
end

local function systems_text(list)
  local rows = {}
  for _, s in ipairs(list) do
    rows[#rows + 1] = {s.name, tostring(s.stage), s.kind, s.enabled and "yes" or "no", tostring(s.runs),
      string.format("%.3f", s.last_ms or 0), string.format("%.3f", s.avg_ms or 0)}
  end
  return table_text({"system", "stage", "kind", "enabled", "runs", "last ms", "avg ms"}, rows)
end
kiln.systems_text = systems_text

local function is_system_list(v)
  return type(v) == "table" and #v > 0 and type(v[1]) == "table" and v[1].stage ~= nil and v[1].kind ~= nil
end

local function generic(v, depth, seen)
  if type(v) ~= "table" then return scalar(v) end
  if seen[v] then return "<cycle>" end
  if depth > 2 then return "{...}" end
  seen[v] = true
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  local parts, n = {}, 0
  for _, k in ipairs(keys) do
    n = n + 1
    if n > 30 then parts[#parts + 1] = "..."; break end
    local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k or ("[" .. scalar(k) .. "]")
    if math.type(k) == "integer" and k == n then key = nil end
    parts[#parts + 1] = (key and (key .. " = ") or "") .. generic(v[k], depth + 1, seen)
  end
  seen[v] = nil
  return "{" .. table.concat(parts, ", ") .. "}"
end

--- kiln.pretty(value, world) -> how the REPL shows a value.
function kiln.pretty(v, world)
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name") or nil
  if name == "kiln.Query" and world then return v:format(world) end
  if name == "kiln.World" then
    local ok, st = pcall(v.stats, v)
    if not ok then return tostring(v) end
    return string.format("kiln.World (%d entities, %d archetypes, %d components, tick %d)",
      st.entities, st.archetypes, st.components, st.tick)
  end
  if is_entity_like(v) and world then
    local ok, text = pcall(world.inspect, world, v)
    if ok then return text end
  end
  if type(v) == "table" and v.schema ~= nil and v.kind ~= nil and v.fields ~= nil and world then
    return world:schema(v.name)
  end
  if is_system_list(v) then return systems_text(v) end
  return generic(v, 0, {})
end
