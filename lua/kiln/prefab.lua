-- prefab.lua: world:prefab(def) and prefab:spawn([count]): a reusable tree of entities given as
-- {components = {Name = fields, ...}, children = {def, ...}}, or as JSON text or a JSON file of
-- the same shape (read by the C addon: lua/src/scene.c). Invariant: a def is checked whole
-- before anything spawns, and a spawn that fails midway takes back what it spawned.
local kiln, World, Query, layer = ...
local tointeger = layer.tointeger
local typename, bounded, bad_argument = layer.typename, layer.bounded, layer.bad_argument
local spawn_all, spawn_into = layer.spawn_all, layer.spawn_into
local unreachable = layer.unreachable
local prefab_json = World.prefab -- the C half: JSON text or a path -> a kiln.PrefabTree

local MAX_DEPTH = 64

local Prefab = {__name = "kiln.Prefab"}
Prefab.__index = Prefab
-- getmetatable(prefab) shows a read-only view: no script can change spawn for the others
Prefab.__metatable = layer.public_meta("kiln.Prefab", Prefab)
local metatable = layer.metatable
-- A prefab is an empty table of class kiln.Prefab; what it spawns (world, and native: a C
-- tree, or def, refs, held) is kept here, by prefab (weak keys), where no script reaches it
-- to change it: world:instantiate (lua/src/scene.c) reads it through the registry.
local parts = layer.prefabs

local function new_prefab(p)
  local prefab = setmetatable({}, Prefab)
  parts[prefab] = p
  return prefab
end

-- Notes the entity fields of one node's value that hold node numbers (1 .. 2^32 - 1: no live
-- handle is that small, so such a number names a node, as in a C desc or a JSON prefab) in
-- state.refs as {node, component, field, index (nil: not an array), target, path}.
local function note_refs(w, node, name, fields, path, state)
  local info = w:component_info(name)
  if type(fields) ~= "table" or info.kind ~= "data" then return end
  local function note(v, field, index)
    local n = tointeger(v)
    if n and n >= 1 and n < 4294967296 then
      local at = path .. ".components." .. name .. "." .. field .. (index and "[" .. index .. "]" or "")
      state.refs[#state.refs + 1] = {node, name, field, index, n, at}
    end
  end
  for _, f in ipairs(info.fields) do
    local v = fields[f.name]
    if f.type == "entity" and f.count == 1 then note(v, f.name)
    elseif f.type == "entity" and type(v) == "table" then
      for i = 1, f.count do note(v[i], f.name, i) end
    end
  end
end

-- A copy of a data component's fields, read raw as a conversion reads them (no metamethods),
-- so that changes the caller makes to its tables after world:prefab do not reach the spawns
-- (nor the node references noted from them). Tables deeper than a field's array of vectors
-- are not read by a conversion: they are kept as they are.
local function copy_fields(v, depth)
  if type(v) ~= "table" or depth > 3 then return v end
  local c = {}
  local k, x = next(v)
  while k ~= nil do
    rawset(c, k, copy_fields(x, depth + 1))
    k, x = next(v, k)
  end
  return c
end

-- Checks that the value of data component info is a table naming only its fields, as a JSON
-- prefab is checked when it is read (a tag's is true): a def naming a field the component no
-- longer has (renamed in a mod's update) was taken, and each spawn raised, far from the def and
-- without its path. The values' types and ranges are still the spawn's to refuse.
local function check_fields(info, fields, path)
  if type(fields) ~= "table" then
    error(string.format("%s: a table of fields expected, got %s", path, typename(fields)), 0)
  end
  local k = next(fields)
  while k ~= nil do
    local known = false
    for _, f in ipairs(info.fields) do known = known or f.name == k end
    if not known then -- (a key's own tostring is not called: the def may be a mod's)
      local key = type(k) == "string" and "'" .. bounded(k) .. "'" or "of type " .. typename(k)
      error(string.format("%s: %s has no field %s", path, info.name, key), 0)
    end
    k = next(fields, k)
  end
end

-- Checks def (at path) against world w; returns a copy the caller cannot change afterwards
-- (a "lua" component's value is kept, as world:spawn keeps it).
-- state numbers the nodes in pre-order (the root is 1) and collects their node references.
local function check_def(w, def, path, depth, state)
  if type(def) ~= "table" then
    error(string.format("%s: a table expected, got %s", path, typename(def)), 0)
  end
  if depth > MAX_DEPTH then error(path .. ": prefabs nest at most 64 deep", 0) end
  -- the def's tables are read raw, as the C binding reads a spawn's (no __pairs, __index or
  -- __len runs: a __pairs returning a number made kiln's own loop fail)
  for k in next, def do
    if k ~= "components" and k ~= "children" then
      error(string.format("%s: unknown key '%s' (expected components, children)", path, bounded(tostring(k))), 0)
    end
  end
  local copy = {components = {}, children = {}}
  state.count = state.count + 1
  local node = state.count
  state.values[node] = copy.components
  local comps = rawget(def, "components") or {}
  if type(comps) ~= "table" then error(path .. ".components: a table expected, got " .. typename(comps), 0) end
  for name, fields in next, comps do
    if type(name) ~= "string" or not w:component_info(name) then
      error(string.format("%s.components: unknown component '%s'", path, bounded(tostring(name))), 0)
    end
    local why = unreachable(w, name) -- in a mod: kiln's own, or the host's Lua-valued
    if why then error(string.format("%s.components: %s", path, why), 0) end
    if name == "Parent" then -- as the JSON form: a Parent value would move the copies elsewhere
      error(path .. ".components: component 'Parent' is given by the tree (children, parent), not as a component", 0)
    end
    local info = w:component_info(name)
    if info.kind == "data" then
      check_fields(info, fields, string.format("%s.components.%s", path, name))
      fields = copy_fields(fields, 1)
    elseif info.kind == "tag" and fields ~= true then
      error(string.format("%s.components.%s: %s is a tag: give true, not %s", path, name, name, typename(fields)), 0)
    end
    -- an owner mark (a mod's tag) is left off, as in a JSON prefab: the copies are the spawner's
    if not info.owner then
      copy.components[name] = fields
      note_refs(w, node, name, fields, path, state)
    end
  end
  local kids = rawget(def, "children") or {}
  if type(kids) ~= "table" then error(path .. ".children: a list expected, got " .. typename(kids), 0) end
  copy.nodes = 1
  local i, child = 1, rawget(kids, 1)
  while child ~= nil do
    copy.children[i] = check_def(w, child, string.format("%s.children[%d]", path, i), depth + 1, state)
    copy.nodes = copy.nodes + copy.children[i].nodes
    i = i + 1
    child = rawget(kids, i)
  end
  return copy
end

--- world:prefab(def) -> prefab: def = {components = {Name = fields}, children = {def, ...}}, or
--- JSON text or a path to a JSON file of the same shape.
function World:prefab(def)
  if typename(self) ~= "kiln.World" then
    error(string.format("calling 'world:prefab' on bad self (kiln.World expected, got %s)", typename(self)), 2)
  end
  if type(def) == "string" then
    local ok, tree = pcall(prefab_json, self, def)
    if not ok then error(tree, 2) end
    return new_prefab{world = self, native = tree}
  end
  if type(def) ~= "table" then
    error(bad_argument(1, "world:prefab", "table, JSON text or path expected, got " .. typename(def)), 2)
  end
  local open, why = pcall(World.count, self) -- a closed world raises here, as every method does
  if not open then error("world:prefab: " .. tostring(why):gsub("^[%a_][%w_.:]*: ", "", 1), 2) end
  local state = {count = 0, refs = {}, values = {}}
  local ok, checked = pcall(check_def, self, def, "def", 1, state)
  if not ok then error("world:prefab: " .. tostring(checked), 2) end
  -- held[node][component]: the def's fields of each component holding node references
  local held = {}
  for _, ref in ipairs(state.refs) do
    if ref[5] > state.count then
      error(string.format("world:prefab: %s: entity %d is not in the prefab (1..%d, or 0)", ref[6], ref[5],
                          state.count), 2)
    end
    held[ref[1]] = held[ref[1]] or {}
    held[ref[1]][ref[2]] = state.values[ref[1]][ref[2]]
  end
  return new_prefab{world = self, def = checked, refs = state.refs, held = held}
end

-- Spawns def's tree under parent; every entity goes to spawned, and to nodes in pre-order.
-- The slot is made before the spawn (false until then), and spawn_into (C) records the
-- entity in it before it returns: neither running out of memory nor a hook raising at the
-- next instruction can come between an entity and its record. The caller takes back all
-- that spawned holds.
local function spawn_tree(w, def, parent, spawned, nodes)
  local k, j = #spawned + 1, #nodes + 1
  spawned[k], nodes[j] = false, false
  local e = spawn_into(w, def.components, spawned, k)
  nodes[j] = e
  if parent then w:set_parent(e, parent) end
  for _, child in ipairs(def.children) do spawn_tree(w, child, e, spawned, nodes) end
  return e
end

-- Points the node references of one spawned copy (nodes: its entities in pre-order) at it:
-- each component holding some is written whole (its def's fields, references pointed). A
-- spawn inside a system is deferred and its entity only reserved, which refuses a set (it
-- raised "entity ... is not alive") but takes an add, queued after the spawn it replaces.
local function point_refs(w, refs, held, nodes)
  local values = {}
  for _, ref in ipairs(refs) do
    local node, name, field, index, target = ref[1], ref[2], ref[3], ref[4], ref[5]
    values[node] = values[node] or {}
    local v = values[node][name] or copy_fields(held[node][name], 1)
    values[node][name] = v
    if index then v[field][index] = nodes[target] else v[field] = nodes[target] end
  end
  for node = 1, #nodes do
    local e = nodes[node]
    for name, v in pairs(values[node] or {}) do
      if w:is_alive(e) then w:set(e, name, v) else w:add(e, name, v) end
    end
  end
end

--- prefab:spawn([count]) -> the root (count nil) or a list of count roots.
function Prefab:spawn(count)
  local p = metatable(self) == Prefab and parts[self]
  if not p then
    error(string.format("calling 'prefab:spawn' on bad self (kiln.Prefab expected, got %s)", typename(self)), 2)
  end
  local n = count == nil and 1 or tointeger(count)
  if not n or n < 0 then error(bad_argument(1, "prefab:spawn", "a count of 0 or more expected"), 2) end
  -- as the C half's: a call spawns at most 2^31 - 1 entities (a larger count is a mistake,
  -- which the loop below would take hours to find out)
  local most = p.def and math.floor(2147483647 / p.def.nodes)
  if most and n > most then
    error(bad_argument(1, "prefab:spawn", string.format("a count from 0 to %d expected", most)), 2)
  end
  if p.native then return p.native:spawn(n, count == nil) end -- all in C, and a tail call
  local w, def, refs, held = p.world, p.def, p.refs, p.held
  local roots, spawned = {}, {}
  -- a tail call: on a raise spawn_all (C) takes back what was spawned before any Lua code
  -- runs again, and once the spawn is done no instruction of this method runs
  return spawn_all(w, function()
    for i = 1, n do
      local nodes = {}
      roots[i] = spawn_tree(w, def, nil, spawned, nodes)
      point_refs(w, refs, held, nodes)
    end
  end, spawned, roots, count == nil)
end
